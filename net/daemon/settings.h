#pragma once

// The volunteer's settings: typed, with defaults and bounds, kept in
// $XDG_CONFIG_HOME/crowdtrain/settings.json (docs/protocol.md, 12.3 lists
// every key). A change is validated first and written atomically (temporary
// name, fsync, rename) before it takes effect; a refused value changes
// nothing and says why. A settings file that cannot be read as settings is
// never silently replaced: it is renamed aside (settings.json.corrupt-<ms>)
// and the daemon starts from the defaults and reports that it did.
//
// Every key's spec (type, default, rule) and the presets are in
// setting_specs.cpp. Not thread-safe: the daemon shares it through
// LiveSettings (live_settings.h).

#include "core/result.h"
#include "net/control/setting_keys.h"
#include "net/control/value.h"

#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace crowdtrain::daemon {

struct SettingSpec {
    enum class Kind { Bool, Int, Text, Choice };
    std::string key;
    Kind kind = Kind::Bool;
    control::Value defaultValue;
    int64_t min = 0; // Int
    int64_t max = 0; // Int
    std::vector<std::string> choices = {}; // Choice
    std::size_t maxBytes = 0; // Text
    std::string description = {};
    // Text: a further rule; returns why a value breaks it ("" when it does not).
    std::string (*rule)(const std::string& value) = nullptr;
};

// A preset names values for the keys it governs ("quiet", "balanced",
// "maximum"); "custom" is what `preset` reads after one of them is set by hand.
struct Preset {
    std::string name;
    std::vector<std::pair<std::string, control::Value>> values;
};
const std::vector<Preset>& presets();

// Every setting the daemon knows, in display order.
const std::vector<SettingSpec>& settingSpecs();

class Settings {
public:
    // Reads `file` (absent: the defaults). `notice` receives what was done
    // about a corrupted file ("" when nothing). Errors: "io_error" (the file
    // could not be read or set aside).
    static Result<Settings> load(const std::filesystem::path& file, std::string& notice);

    // Checks `value` for `key` and, when valid, writes the file with it.
    // Setting `preset` sets the keys it governs too; setting one of those
    // keys to another value makes `preset` "custom". All in one write.
    // Errors: "unknown_setting", "bad_value" (with the rule broken), "io_error".
    Status set(const std::string& key, const control::Value& value);

    // A setting's value, through its typed key (net/control/setting_keys.h).
    bool get(control::SettingKey<bool> key) const { return value(key.name).toBool(); }
    int64_t get(control::SettingKey<int64_t> key) const { return value(key.name).toInt(); }
    std::string get(control::SettingKey<std::string> key) const { return value(key.name).toString(); }

    // {key: value, ...}
    control::Value values() const;
    // [{key, type, value, default, min, max, choices, description}, ...]
    control::Value described() const;
    const std::filesystem::path& file() const { return m_file; }

private:
    const control::Value& value(std::string_view key) const; // nil for an unknown key
    Status save() const;

    std::filesystem::path m_file;
    std::map<std::string, control::Value, std::less<>> m_values;
};

// Why `value` is not a valid value of `spec` ("" when it is).
std::string checkSetting(const SettingSpec& spec, const control::Value& value);

} // namespace crowdtrain::daemon
