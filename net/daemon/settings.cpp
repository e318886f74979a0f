#include "net/daemon/settings.h"

#include "net/transport/atomic_write.h"
#include "net/wire/text_checks.h"

#include <chrono>
#include <nlohmann/json.hpp>

namespace crowdtrain::daemon {

namespace {

using json = nlohmann::json;
using Kind = SettingSpec::Kind;

constexpr std::size_t kMaxSettingsFileBytes = 1 << 20;

const SettingSpec* findSpec(std::string_view key)
{
    for (const SettingSpec& spec : settingSpecs())
        if (spec.key == key)
            return &spec;
    return nullptr;
}

control::Value fromJson(const SettingSpec& spec, const json& value)
{
    switch (spec.kind) {
    case Kind::Bool:
        return value.is_boolean() ? control::Value(value.get<bool>()) : control::Value();
    case Kind::Int:
        if (value.is_number_unsigned())
            return control::Value(value.get<uint64_t>());
        return value.is_number_integer() ? control::Value(value.get<int64_t>()) : control::Value();
    case Kind::Text:
    case Kind::Choice:
        return value.is_string() ? control::Value(value.get<std::string>()) : control::Value();
    }
    return {};
}

json toJson(const control::Value& value)
{
    if (value.isBool())
        return value.toBool();
    if (value.kind() == control::Value::Kind::UInt)
        return value.toUInt();
    if (value.isInt())
        return value.toInt();
    return value.toString();
}

const char* kindName(Kind kind)
{
    switch (kind) {
    case Kind::Bool:
        return "bool";
    case Kind::Int:
        return "int";
    case Kind::Text:
        return "text";
    case Kind::Choice:
        return "choice";
    }
    return "?";
}

} // namespace

const std::vector<SettingSpec>& settingSpecs()
{
    static const std::vector<SettingSpec> specs = [] {
        std::vector<SettingSpec> s;
        s.push_back({.key = "display_name",
            .kind = Kind::Text,
            .defaultValue = "",
            .maxBytes = 64,
            .description = "name shown on leaderboards; empty: anonymous"});
        s.push_back({.key = "device",
            .kind = Kind::Choice,
            .defaultValue = "auto",
            .choices = {"auto", "cpu", "cuda"},
            .description = "where to train: auto (a GPU when there is one), cpu or cuda"});
        s.push_back({.key = "cpu_threads",
            .kind = Kind::Int,
            .defaultValue = int64_t(0),
            .min = 0,
            .max = 1024,
            .description = "CPU threads for training; 0: all cores"});
        s.push_back({.key = "auto_download",
            .kind = Kind::Bool,
            .defaultValue = true,
            .description = "download each new checkpoint of the joined project"});
        s.push_back({.key = "auto_download_max_bytes",
            .kind = Kind::Int,
            .defaultValue = int64_t(1000000000),
            .min = 0,
            .max = int64_t(1) << 50,
            .description = "automatic downloads only of checkpoints up to this size"});
        s.push_back({.key = "piece_cache_bytes",
            .kind = Kind::Int,
            .defaultValue = int64_t(2) << 30,
            .min = int64_t(16) << 20,
            .max = int64_t(1) << 50,
            .description = "disk for cached training data; the oldest pieces go first"});
        s.push_back({.key = "generate_pauses_training",
            .kind = Kind::Bool,
            .defaultValue = true,
            .description = "pause training while text is generated from a checkpoint"});
        return s;
    }();
    return specs;
}

std::string checkSetting(const SettingSpec& spec, const control::Value& value)
{
    switch (spec.kind) {
    case Kind::Bool:
        return value.isBool() ? "" : spec.key + " takes true or false";
    case Kind::Int: {
        if (!value.isInt())
            return spec.key + " takes a whole number";
        const bool negative = value.kind() == control::Value::Kind::Int && value.toInt() < 0;
        if (negative || (value.kind() == control::Value::Kind::UInt && value.toUInt() > uint64_t(INT64_MAX))
            || value.toInt() < spec.min || value.toInt() > spec.max)
            return spec.key + " takes a number from " + std::to_string(spec.min) + " to " + std::to_string(spec.max);
        return "";
    }
    case Kind::Text:
        if (!value.isString())
            return spec.key + " takes text";
        if (value.toString().size() > spec.maxBytes)
            return spec.key + " takes at most " + std::to_string(spec.maxBytes) + " bytes";
        if (!value.toString().empty() && !net::isDisplayText(value.toString()))
            return spec.key + " must be valid UTF-8 without control characters or direction overrides";
        return "";
    case Kind::Choice:
        if (value.isString())
            for (const std::string& choice : spec.choices)
                if (choice == value.toString())
                    return "";
        {
            std::string list;
            for (const std::string& choice : spec.choices)
                list += (list.empty() ? "" : ", ") + choice;
            return spec.key + " takes one of: " + list;
        }
    }
    return "unknown kind";
}

Result<Settings> Settings::load(const std::filesystem::path& file, std::string& notice)
{
    notice.clear();
    Settings settings;
    settings.m_file = file;
    for (const SettingSpec& spec : settingSpecs())
        settings.m_values[spec.key] = spec.defaultValue;
    std::error_code ec;
    if (!std::filesystem::exists(file, ec))
        return settings;
    auto text = net::readSmallFile(file, kMaxSettingsFileBytes);
    std::string problem;
    json root;
    if (!text) {
        if (text.error().code != "too_large")
            return text.error();
        problem = "it is larger than 1 MiB";
    } else {
        root = json::parse(*text, nullptr, false);
        if (root.is_discarded() || !root.is_object())
            problem = "it is not a JSON object";
        else if (!root.contains("settings") || !root["settings"].is_object())
            problem = "it has no \"settings\" object";
    }
    if (problem.empty()) {
        for (const auto& [key, raw] : root["settings"].items()) {
            const SettingSpec* spec = findSpec(key);
            if (!spec) {
                notice += (notice.empty() ? "" : "; ") + std::string("unknown setting \"") + key + "\" ignored";
                continue;
            }
            const control::Value value = fromJson(*spec, raw);
            if (const std::string why = checkSetting(*spec, value); !why.empty()) {
                problem = why + " (found " + raw.dump() + ")";
                break;
            }
            settings.m_values[key] = value;
        }
    }
    if (problem.empty())
        return settings;
    const auto now
        = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
              .count();
    const std::filesystem::path aside = file.string() + ".corrupt-" + std::to_string(now);
    std::filesystem::rename(file, aside, ec);
    if (ec)
        return Error::make("io_error", "cannot set aside the corrupted " + file.string() + ": " + ec.message());
    for (const SettingSpec& spec : settingSpecs())
        settings.m_values[spec.key] = spec.defaultValue;
    notice = "the settings file " + file.string() + " could not be used (" + problem + "); it was moved to "
        + aside.string() + " and the defaults are in effect";
    return settings;
}

Status Settings::set(const std::string& key, const control::Value& value)
{
    const SettingSpec* spec = findSpec(key);
    if (!spec)
        return Error::make("unknown_setting", "there is no setting \"" + key + "\"");
    if (const std::string why = checkSetting(*spec, value); !why.empty())
        return Error::make("bad_value", why);
    control::Value old = m_values[key];
    m_values[key] = value;
    if (Status saved = save(); !saved) {
        m_values[key] = std::move(old);
        return saved;
    }
    return Status::success();
}

const control::Value& Settings::value(const std::string& key) const
{
    static const control::Value nil;
    auto it = m_values.find(key);
    return it == m_values.end() ? nil : it->second;
}

control::Value Settings::values() const
{
    control::Value map = control::Value::map();
    for (const SettingSpec& spec : settingSpecs())
        map.set(spec.key, value(spec.key));
    return map;
}

control::Value Settings::described() const
{
    control::Value list = control::Value::array();
    for (const SettingSpec& spec : settingSpecs()) {
        control::Value item = control::Value::map();
        item.set("key", spec.key).set("type", kindName(spec.kind)).set("value", value(spec.key));
        item.set("default", spec.defaultValue).set("description", spec.description);
        if (spec.kind == Kind::Int)
            item.set("min", spec.min).set("max", spec.max);
        if (spec.kind == Kind::Choice) {
            control::Value choices = control::Value::array();
            for (const std::string& choice : spec.choices)
                choices.push(choice);
            item.set("choices", std::move(choices));
        }
        list.push(std::move(item));
    }
    return list;
}

Status Settings::save() const
{
    json settings = json::object();
    for (const auto& [key, value] : m_values)
        settings[key] = toJson(value);
    const json root = {{"version", 1}, {"settings", settings}};
    std::error_code ec;
    std::filesystem::create_directories(m_file.parent_path(), ec);
    if (ec)
        return Error::make("io_error", m_file.parent_path().string() + ": " + ec.message());
    return net::writeFileAtomic(m_file, root.dump(2) + "\n", 0600);
}

} // namespace crowdtrain::daemon
