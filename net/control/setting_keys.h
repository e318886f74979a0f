#pragma once

// The daemon's settings keys (docs/protocol.md 12.3), each with the type of
// its value, so that a setting read through a key that does not exist does
// not compile (no typo silently reads as 0 or "") and a key read as the
// wrong type does not either. The daemon's Settings::get takes these; the
// app and the CLI name keys in settings_set requests with them. A key is
// added here, never renamed. Header-only, no dependencies.

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace crowdtrain::control {

// A setting's wire key and, as T, its value's type: bool, int64_t, or
// std::string (text and choice settings).
template <typename T> struct SettingKey {
    std::string_view name;
};

namespace setting {
inline constexpr SettingKey<std::string> kDisplayName{"display_name"};
inline constexpr SettingKey<std::string> kDevice{"device"}; // choice: auto, cpu, cuda
inline constexpr SettingKey<int64_t> kCpuThreads{"cpu_threads"};
inline constexpr SettingKey<bool> kAutoDownload{"auto_download"};
inline constexpr SettingKey<int64_t> kAutoDownloadMaxBytes{"auto_download_max_bytes"};
inline constexpr SettingKey<int64_t> kPieceCacheBytes{"piece_cache_bytes"};
inline constexpr SettingKey<bool> kGeneratePausesTraining{"generate_pauses_training"};
inline constexpr SettingKey<std::string> kPreset{"preset"}; // choice: quiet, balanced, maximum, custom
inline constexpr SettingKey<int64_t> kBusyShareInUse{"busy_share_in_use"};
inline constexpr SettingKey<int64_t> kBusyShareIdle{"busy_share_idle"};
inline constexpr SettingKey<bool> kPauseWhenInUse{"pause_when_in_use"};
inline constexpr SettingKey<int64_t> kInUseMinutes{"in_use_minutes"};
inline constexpr SettingKey<bool> kPauseOnBattery{"pause_on_battery"};
inline constexpr SettingKey<std::string> kPausePrograms{"pause_programs"};
inline constexpr SettingKey<bool> kPauseWhenGpuBusy{"pause_when_gpu_busy"};
inline constexpr SettingKey<int64_t> kGpuMemoryLimitMib{"gpu_memory_limit_mib"};
inline constexpr SettingKey<int64_t> kGpuMemoryFreeMib{"gpu_memory_free_mib"};
inline constexpr SettingKey<int64_t> kMaxGpuTemperatureC{"max_gpu_temperature_c"};
inline constexpr SettingKey<int64_t> kMaxGpuPowerW{"max_gpu_power_w"};
inline constexpr SettingKey<std::string> kSchedule{"schedule"};
inline constexpr SettingKey<int64_t> kUploadLimitKibS{"upload_limit_kib_s"};
inline constexpr SettingKey<int64_t> kDownloadLimitKibS{"download_limit_kib_s"};
inline constexpr SettingKey<int64_t> kMonthlyDataCapMib{"monthly_data_cap_mib"};
inline constexpr SettingKey<std::string> kGpuDevices{"gpu_devices"};
inline constexpr SettingKey<std::string> kSeeding{"seeding"}; // choice: while_training, always, never
inline constexpr SettingKey<int64_t> kSwarmPort{"swarm_port"};

// The `preset` choices and the device choices, as the wire spells them.
inline constexpr std::string_view kPresetQuiet = "quiet";
inline constexpr std::string_view kPresetBalanced = "balanced";
inline constexpr std::string_view kPresetMaximum = "maximum";
inline constexpr std::string_view kPresetCustom = "custom";
inline constexpr std::string_view kDeviceAuto = "auto";
inline constexpr std::string_view kDeviceCpu = "cpu";
inline constexpr std::string_view kDeviceCuda = "cuda";
inline constexpr std::string_view kSeedingWhileTraining = "while_training";
inline constexpr std::string_view kSeedingAlways = "always";
inline constexpr std::string_view kSeedingNever = "never";
} // namespace setting

// The `type` of a setting in settings_get's `described`.
namespace setting_type {
inline constexpr std::string_view kBool = "bool";
inline constexpr std::string_view kInt = "int";
inline constexpr std::string_view kText = "text";
inline constexpr std::string_view kChoice = "choice";
} // namespace setting_type

} // namespace crowdtrain::control
