#include "net/daemon/settings.h"

#include "net/wire/text_checks.h"

namespace crowdtrain::daemon {

namespace {

using Kind = SettingSpec::Kind;
namespace setting = control::setting;

std::string scheduleRule(const std::string& value)
{
    if (value.size() != 168 || value.find_first_not_of("01") != std::string::npos)
        return "schedule takes exactly 168 characters 0 or 1 (hour h of weekday d, Monday 0, at d*24+h)";
    return "";
}

std::string devicesRule(const std::string& value)
{
    static const std::string kWhy = "gpu_devices takes \"all\" or GPU numbers 0 to 1023 separated by commas (0,1)";
    if (value == "all")
        return "";
    // Each item: spaces, 1 to 4 digits at most 1023, spaces.
    int digits = 0;
    int number = 0;
    bool any = false;
    for (char c : value) {
        if (c >= '0' && c <= '9') {
            number = number * 10 + (c - '0');
            if (++digits > 4 || number > 1023)
                return kWhy;
            any = true;
        } else if (c == ',' && digits > 0) {
            digits = 0;
            number = 0;
        } else if (c != ' ') {
            return kWhy;
        }
    }
    return any && digits > 0 ? "" : kWhy;
}

} // namespace

const std::vector<Preset>& presets()
{
    static const std::vector<Preset> list = {
        {std::string(setting::kPresetQuiet),
            {{std::string(setting::kBusyShareInUse.name), int64_t(25)},
                {std::string(setting::kBusyShareIdle.name), int64_t(50)},
                {std::string(setting::kPauseWhenInUse.name), false},
                {std::string(setting::kMaxGpuTemperatureC.name), int64_t(75)}}},
        {std::string(setting::kPresetBalanced),
            {{std::string(setting::kBusyShareInUse.name), int64_t(50)},
                {std::string(setting::kBusyShareIdle.name), int64_t(100)},
                {std::string(setting::kPauseWhenInUse.name), false},
                {std::string(setting::kMaxGpuTemperatureC.name), int64_t(83)}}},
        {std::string(setting::kPresetMaximum),
            {{std::string(setting::kBusyShareInUse.name), int64_t(100)},
                {std::string(setting::kBusyShareIdle.name), int64_t(100)},
                {std::string(setting::kPauseWhenInUse.name), false},
                {std::string(setting::kMaxGpuTemperatureC.name), int64_t(83)}}},
    };
    return list;
}

const std::vector<SettingSpec>& settingSpecs()
{
    static const std::vector<SettingSpec> specs = [] {
        std::vector<SettingSpec> s;
        s.push_back({.key = std::string(setting::kDisplayName.name),
            .kind = Kind::Text,
            .defaultValue = "",
            .maxBytes = 64,
            .description = "name shown on leaderboards; empty: anonymous"});
        s.push_back({.key = std::string(setting::kDevice.name),
            .kind = Kind::Choice,
            .defaultValue = std::string(setting::kDeviceAuto),
            .choices
            = {std::string(setting::kDeviceAuto), std::string(setting::kDeviceCpu), std::string(setting::kDeviceCuda)},
            .description = "where to train: auto (a GPU when there is one), cpu or cuda"});
        s.push_back({.key = std::string(setting::kCpuThreads.name),
            .kind = Kind::Int,
            .defaultValue = int64_t(0),
            .min = 0,
            .max = 1024,
            .description = "CPU threads for training; 0: all cores"});
        s.push_back({.key = std::string(setting::kAutoDownload.name),
            .kind = Kind::Bool,
            .defaultValue = true,
            .description = "download each new checkpoint of the joined project"});
        s.push_back({.key = std::string(setting::kAutoDownloadMaxBytes.name),
            .kind = Kind::Int,
            .defaultValue = int64_t(1) << 30, // 1 GiB: shown round by the app's MiB/GiB/TiB editor
            .min = 0,
            .max = int64_t(1) << 50,
            .description = "automatic downloads only of checkpoints up to this size"});
        s.push_back({.key = std::string(setting::kPieceCacheBytes.name),
            .kind = Kind::Int,
            .defaultValue = int64_t(2) << 30,
            .min = int64_t(16) << 20,
            .max = int64_t(1) << 50,
            .description = "disk for cached training data; the oldest pieces go first"});
        s.push_back({.key = std::string(setting::kGeneratePausesTraining.name),
            .kind = Kind::Bool,
            .defaultValue = true,
            .description = "pause training while text is generated from a checkpoint"});
        // Limits (docs/notes/limits-settings.md; the policy is net/limits/policy.h).
        s.push_back({.key = std::string(setting::kPreset.name),
            .kind = Kind::Choice,
            .defaultValue = std::string(setting::kPresetBalanced),
            .choices = {std::string(setting::kPresetQuiet), std::string(setting::kPresetBalanced),
                std::string(setting::kPresetMaximum), std::string(setting::kPresetCustom)},
            .description = "quiet, balanced or maximum set the busy shares and temperature at once"});
        s.push_back({.key = std::string(setting::kBusyShareInUse.name),
            .kind = Kind::Int,
            .defaultValue = int64_t(50),
            .min = 0,
            .max = 100,
            .description = "% of the time the GPU works while you use the computer; 0: pause"});
        s.push_back({.key = std::string(setting::kBusyShareIdle.name),
            .kind = Kind::Int,
            .defaultValue = int64_t(100),
            .min = 1,
            .max = 100,
            .description = "% of the time the GPU works while the computer is idle"});
        s.push_back({.key = std::string(setting::kPauseWhenInUse.name),
            .kind = Kind::Bool,
            .defaultValue = false,
            .description = "pause while you use the computer, instead of working at the in-use share"});
        s.push_back({.key = std::string(setting::kInUseMinutes.name),
            .kind = Kind::Int,
            .defaultValue = int64_t(3),
            .min = 1,
            .max = 120,
            .description = "keyboard or mouse input within this many minutes means the computer is in use"});
        s.push_back({.key = std::string(setting::kPauseOnBattery.name),
            .kind = Kind::Bool,
            .defaultValue = true,
            .description = "pause while the computer runs on battery"});
        s.push_back({.key = std::string(setting::kPausePrograms.name),
            .kind = Kind::Text,
            .defaultValue = "",
            .maxBytes = 1024,
            .description = "pause while any of these programs runs (names separated by commas, e.g. blender, steam)"});
        s.push_back({.key = std::string(setting::kPauseWhenGpuBusy.name),
            .kind = Kind::Bool,
            .defaultValue = true,
            .description = "pause while another program uses the GPU heavily (a game, a renderer)"});
        s.push_back({.key = std::string(setting::kGpuMemoryLimitMib.name),
            .kind = Kind::Int,
            .defaultValue = int64_t(0),
            .min = 0,
            .max = int64_t(1) << 30,
            .description
            = "GPU memory training may use, in MiB; 0: all but gpu_memory_free_mib (applies at the next join)"});
        s.push_back({.key = std::string(setting::kGpuMemoryFreeMib.name),
            .kind = Kind::Int,
            .defaultValue = int64_t(1024),
            .min = 0,
            .max = int64_t(1) << 20,
            .description = "with no limit set, leave this much GPU memory free for other programs"});
        s.push_back({.key = std::string(setting::kMaxGpuTemperatureC.name),
            .kind = Kind::Int,
            .defaultValue = int64_t(83),
            .min = 40,
            .max = 100,
            .description = "pause above this GPU temperature (or 5 \u00B0C under the card's slowdown point); "
                           "resume 10 \u00B0C lower, after at least 5 minutes"});
        s.push_back({.key = std::string(setting::kMaxGpuPowerW.name),
            .kind = Kind::Int,
            .defaultValue = int64_t(0),
            .min = 0,
            .max = 2000,
            .description = "pause while the GPU draws more than this many watts; 0: no cap"});
        s.push_back({.key = std::string(setting::kSchedule.name),
            .kind = Kind::Text,
            .defaultValue = std::string(168, '1'),
            .maxBytes = 168,
            .description = "the hours of the week when training may run",
            .rule = scheduleRule});
        s.push_back({.key = std::string(setting::kUploadLimitKibS.name),
            .kind = Kind::Int,
            .defaultValue = int64_t(0),
            .min = 0,
            .max = int64_t(1) << 30,
            .description = "upload at most this many KiB/s; 0: no limit"});
        s.push_back({.key = std::string(setting::kDownloadLimitKibS.name),
            .kind = Kind::Int,
            .defaultValue = int64_t(0),
            .min = 0,
            .max = int64_t(1) << 30,
            .description = "download at most this many KiB/s; 0: no limit"});
        s.push_back({.key = std::string(setting::kSeeding.name),
            .kind = Kind::Choice,
            .defaultValue = std::string(setting::kSeedingWhileTraining),
            .choices = {std::string(setting::kSeedingWhileTraining), std::string(setting::kSeedingAlways),
                std::string(setting::kSeedingNever)},
            .description = "share downloaded checkpoints with other volunteers (BitTorrent, within the upload "
                           "limit): while_training, always, or never (choose never on a metered link)"});
        s.push_back({.key = std::string(setting::kSwarmPort.name),
            .kind = Kind::Int,
            .defaultValue = int64_t(0),
            .min = 0,
            .max = 65535,
            .description = "the TCP/UDP port checkpoint sharing listens on; 0: a free port (takes effect at "
                           "the next start)"});
        s.push_back({.key = std::string(setting::kMonthlyDataCapMib.name),
            .kind = Kind::Int,
            .defaultValue = int64_t(0),
            .min = 0,
            .max = int64_t(1) << 30,
            .description = "pause when this month's traffic reaches this many MiB; 0: no cap"});
        s.push_back({.key = std::string(setting::kGpuDevices.name),
            .kind = Kind::Text,
            .defaultValue = "all",
            .maxBytes = 64,
            .description = "the GPUs to train on: all, or their numbers (0,1); the first one listed is used",
            .rule = devicesRule});
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
        return spec.rule ? spec.rule(value.toString()) : "";
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

} // namespace crowdtrain::daemon
