#include "net/daemon/state_file.h"

#include "core/clock.h"
#include "core/file_io.h"

#include <chrono>

namespace crowdtrain::daemon {

namespace {

std::string missingOr(const nlohmann::json& root, const char* key, const char* what)
{
    if (!root.contains(key))
        return std::string("\"") + key + "\" is missing";
    return std::string("\"") + key + "\" is not " + what;
}

} // namespace

std::string setAside(const std::filesystem::path& file, const std::string& why)
{
    const auto now = core::unixNowMs();
    const std::filesystem::path aside = file.string() + ".bad-" + std::to_string(now);
    std::error_code ec;
    std::filesystem::rename(file, aside, ec);
    if (ec)
        return file.string() + " could not be used (" + why + ") nor set aside (" + ec.message() + "); ignored";
    return file.string() + " could not be used (" + why + "); it was moved to " + aside.string();
}

std::optional<nlohmann::json> readStateFile(
    const std::filesystem::path& file, std::size_t maxBytes, const StateCheck& check, std::string& notice)
{
    notice.clear();
    std::error_code ec;
    if (!std::filesystem::exists(file, ec))
        return std::nullopt;
    auto text = core::readFile(file, maxBytes);
    std::string why;
    nlohmann::json root;
    if (!text) {
        why = text.error().message;
    } else {
        root = nlohmann::json::parse(*text, nullptr, false);
        if (root.is_discarded())
            why = "it is not JSON (truncated or garbage)";
        else if (!root.is_object())
            why = "it is not a JSON object";
        else if (check)
            why = check(root);
    }
    if (why.empty())
        return root;
    notice = setAside(file, why);
    return std::nullopt;
}

std::string expectString(const nlohmann::json& root, const char* key)
{
    return root.contains(key) && root[key].is_string() ? "" : missingOr(root, key, "text");
}

std::string expectBool(const nlohmann::json& root, const char* key)
{
    return root.contains(key) && root[key].is_boolean() ? "" : missingOr(root, key, "true or false");
}

std::string expectUnsigned(const nlohmann::json& root, const char* key)
{
    return root.contains(key) && root[key].is_number_unsigned() ? "" : missingOr(root, key, "a non-negative integer");
}

std::string expectInteger(const nlohmann::json& root, const char* key)
{
    return root.contains(key) && root[key].is_number_integer() ? "" : missingOr(root, key, "an integer");
}

} // namespace crowdtrain::daemon
