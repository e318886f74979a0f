#include "net/daemon/settings.h"

#include "core/clock.h"
#include "core/file_io.h"
#include "net/control/control_names.h"
#include "net/wire/error_codes.h"
#include "net/wire/text_checks.h"

#include <chrono>

namespace crowdtrain::daemon {

namespace {

using Kind = SettingSpec::Kind;
namespace setting = control::setting;

constexpr std::size_t kMaxSettingsFileBytes = 1 << 20;

const SettingSpec* findSpec(std::string_view key)
{
    for (const SettingSpec& spec : settingSpecs())
        if (spec.key == key)
            return &spec;
    return nullptr;
}

std::string_view kindName(Kind kind)
{
    switch (kind) {
    case Kind::Bool:
        return control::setting_type::kBool;
    case Kind::Int:
        return control::setting_type::kInt;
    case Kind::Text:
        return control::setting_type::kText;
    case Kind::Choice:
        return control::setting_type::kChoice;
    }
    return "?";
}

} // namespace

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
    auto text = core::readFile(file, kMaxSettingsFileBytes);
    std::string problem;
    control::Value root;
    if (!text) {
        if (text.error().code != net::errc::kTooLarge)
            return text.error();
        problem = "it is larger than 1 MiB";
    } else if (auto parsed = control::Value::fromJson(*text); !parsed) {
        problem = parsed.error().message; // where the JSON breaks, or the cap it passes
    } else if (!parsed->isMap()) {
        problem = "it is not a JSON object";
    } else if (!(*parsed)["settings"].isMap()) {
        problem = "it has no \"settings\" object";
    } else {
        root = std::move(*parsed);
    }
    if (problem.empty()) {
        // Each value is checked against its key's spec, its kind first.
        for (const auto& [key, value] : root["settings"].entries()) {
            const SettingSpec* spec = findSpec(key);
            if (!spec) {
                notice += (notice.empty() ? "" : "; ") + std::string("unknown setting \"") + key + "\" ignored";
                continue;
            }
            if (const std::string why = checkSetting(*spec, value); !why.empty()) {
                problem = why + " (found " + value.toJson() + ")";
                break;
            }
            settings.m_values[key] = value;
        }
    }
    if (problem.empty())
        return settings;
    const auto now = core::unixNowMs();
    const std::filesystem::path aside = file.string() + ".corrupt-" + std::to_string(now);
    std::filesystem::rename(file, aside, ec);
    if (ec)
        return Error::make(
            net::errc::kIoError, "cannot set aside the corrupted " + file.string() + ": " + ec.message());
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
        return Error::make(control::errc::kUnknownSetting, "there is no setting \"" + key + "\"");
    if (const std::string why = checkSetting(*spec, value); !why.empty())
        return Error::make(control::errc::kBadValue, why);
    const auto old = m_values;
    m_values[key] = value;
    for (const Preset& preset : presets()) {
        if (key == setting::kPreset.name && value.toString() == preset.name)
            for (const auto& [governed, presetValue] : preset.values)
                m_values[governed] = presetValue;
        for (const auto& [governed, presetValue] : preset.values)
            if (key == governed && !(old.at(key) == value))
                m_values[std::string(setting::kPreset.name)] = control::Value(std::string(setting::kPresetCustom));
    }
    if (Status saved = save(); !saved) {
        m_values = old;
        return saved;
    }
    return Status::success();
}

const control::Value& Settings::value(std::string_view key) const
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
    control::Value settings = control::Value::map();
    for (const auto& [key, value] : m_values)
        settings.set(key, value);
    // Keys in the order the file has always had (nlohmann::json sorted them).
    control::Value root = control::Value::map().set("settings", std::move(settings)).set("version", 1);
    std::error_code ec;
    std::filesystem::create_directories(m_file.parent_path(), ec);
    if (ec)
        return Error::make(net::errc::kIoError, m_file.parent_path().string() + ": " + ec.message());
    return core::writeFileAtomic(m_file, root.toJson(2) + "\n", 0600);
}

} // namespace crowdtrain::daemon
