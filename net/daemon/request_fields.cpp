#include "net/daemon/request_fields.h"

#include "net/control/control_names.h"
#include "net/control/utf8_text.h"
#include "net/wire/text_checks.h"

#include <cstdio>

namespace crowdtrain::daemon {

namespace {

std::string quoted(std::string_view key)
{
    return "\"" + std::string(key) + "\"";
}

bool given(const control::Value& body, std::string_view key)
{
    return body.has(key) && !body[key].isNil();
}

} // namespace

Error badRequest(const std::string& message)
{
    return Error::make(control::errc::kBadRequest, message);
}

Result<std::string> requiredText(const control::Value& body, std::string_view key)
{
    if (!body[key].isString() || body[key].toString().empty())
        return badRequest(quoted(key) + " is required (text)");
    return body[key].toString();
}

Result<std::optional<std::string>> optionalText(const control::Value& body, std::string_view key)
{
    if (!given(body, key))
        return std::optional<std::string>();
    if (!body[key].isString())
        return badRequest(quoted(key) + " must be text");
    return std::optional<std::string>(body[key].toString());
}

std::string nameProblem(std::string_view key, std::string_view name)
{
    if (net::isProjectName(name))
        return "";
    return quoted(key) + " is not a project name (1 to 64 of a-z, 0-9 and -): \"" + control::toValidUtf8(name, 80)
        + "\"";
}

Result<std::string> requiredName(const control::Value& body, std::string_view key)
{
    if (!body[key].isString())
        return badRequest(quoted(key) + " is required (a project name: 1 to 64 of a-z, 0-9 and -)");
    if (std::string why = nameProblem(key, body[key].toString()); !why.empty())
        return badRequest(why);
    return body[key].toString();
}

Result<std::optional<std::string>> optionalName(const control::Value& body, std::string_view key)
{
    if (!given(body, key))
        return std::optional<std::string>();
    auto name = requiredName(body, key);
    if (!name)
        return name.error();
    return std::optional<std::string>(std::move(*name));
}

Result<std::optional<bool>> optionalBool(const control::Value& body, std::string_view key)
{
    if (!given(body, key))
        return std::optional<bool>();
    if (!body[key].isBool())
        return badRequest(quoted(key) + " must be true or false");
    return std::optional<bool>(body[key].toBool());
}

Result<std::optional<int64_t>> optionalInt(const control::Value& body, std::string_view key, int64_t min, int64_t max)
{
    if (!given(body, key))
        return std::optional<int64_t>();
    const control::Value& v = body[key];
    const bool fits = v.kind() == control::Value::Kind::Int && v.toInt() >= min && v.toInt() <= max;
    if (!fits)
        return badRequest(
            quoted(key) + " must be an integer from " + std::to_string(min) + " to " + std::to_string(max));
    return std::optional<int64_t>(v.toInt());
}

Result<uint64_t> requiredUInt(const control::Value& body, std::string_view key)
{
    const control::Value& v = body[key];
    if (!v.isInt() || (v.kind() == control::Value::Kind::Int && v.toInt() < 0))
        return badRequest(quoted(key) + " is required (a non-negative integer)");
    return v.toUInt();
}

Result<std::optional<uint64_t>> optionalUInt(const control::Value& body, std::string_view key)
{
    if (!given(body, key))
        return std::optional<uint64_t>();
    auto value = requiredUInt(body, key);
    if (!value)
        return badRequest(quoted(key) + " must be a non-negative integer");
    return std::optional<uint64_t>(*value);
}

Result<std::optional<double>> optionalNumber(const control::Value& body, std::string_view key, double min, double max)
{
    if (!given(body, key))
        return std::optional<double>();
    const control::Value& v = body[key];
    const double d = v.toDouble(min - 1);
    if (!v.isNumber() || !(d >= min && d <= max)) {
        char range[64];
        std::snprintf(range, sizeof range, " must be a number from %g to %g", min, max);
        return badRequest(quoted(key) + range);
    }
    return std::optional<double>(d);
}

} // namespace crowdtrain::daemon
