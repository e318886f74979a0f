#pragma once

// What the volunteer's limits say now: a pure function of the limit
// settings, the machine's readings and the clock, plus the little the policy
// must remember between evaluations (when a temperature pause began, how long
// another program has been using the GPU), passed in and handed back, so
// every rule is testable with a made-up clock and made-up readings.
//
// The rules, first match wins (docs/protocol.md 12.3 names the settings):
//   schedule       the hour of the week (local time) is off in the grid
//   battery        on battery power and pause_on_battery
//   programs       a listed program runs
//   temperature    the GPU is above min(max_gpu_temperature_c, its slowdown
//                  threshold - 5); resumes 10 C lower and >= 5 minutes later
//   power          the GPU draws more than max_gpu_power_w; resumes under
//                  90% of it and >= 5 minutes later
//   GPU busy       another process has used the GPU heavily for 10 s;
//                  resumes when it has been quiet for 60 s
//   data cap       this month's traffic reached monthly_data_cap_mib
//   in use         input within in_use_minutes: busy_share_in_use (0 or
//                  pause_when_in_use: paused), else busy_share_idle.

#include "net/control/control_names.h"

#include <chrono>
#include <cstdint>
#include <ctime>
#include <optional>
#include <string>
#include <vector>

namespace crowdtrain::limits {

struct LimitSettings {
    int busyShareInUse = 50; // %
    int busyShareIdle = 100; // %
    bool pauseWhenInUse = false;
    int inUseMinutes = 3;
    bool pauseOnBattery = true;
    std::vector<std::string> pausePrograms;
    bool pauseWhenGpuBusy = true;
    int maxGpuTemperatureC = 83;
    int maxGpuPowerW = 0; // 0: no cap
    std::string schedule = std::string(168, '1'); // hour h of weekday d (Monday 0) at d*24+h
    uint64_t monthlyDataCapBytes = 0; // 0: none
};

struct GpuReading {
    double temperatureC = 0;
    std::optional<double> slowdownC; // the card's own slowdown threshold
    std::optional<double> powerW;
    std::optional<double> utilization; // 0..1, all processes
    bool othersBusy = false; // another process uses the GPU heavily now
};

struct Readings {
    std::optional<bool> onBattery; // nullopt: the machine has no battery
    std::optional<double> idleSeconds; // since the last keyboard/mouse input; nullopt: unknown
    std::vector<std::string> programs; // executable names running now
    std::optional<GpuReading> gpu; // nullopt: no NVML
    uint64_t monthBytes = 0;
};

// What the policy carries from one evaluation to the next.
struct PolicyMemory {
    std::optional<int64_t> hotSinceMs; // a temperature pause began
    std::optional<int64_t> powerSinceMs; // a power pause began
    std::optional<int64_t> othersBusySinceMs; // another process began using the GPU
    std::optional<int64_t> othersQuietSinceMs; // ... stopped, during a GPU-busy pause
    bool gpuBusyPause = false;
};

struct Decision {
    bool run = true;
    double busyTarget = 1.0; // share of wall time, when running
    bool inUse = false;
    // Plain words for the limit acting now ("" when none), e.g. "on battery",
    // "outside the schedule (resumes Tue 08:00)", "busy share 50% (computer in use)".
    std::string limit;
    // The same as a code for programs (the status's `limit_code`).
    control::LimitCode code = control::LimitCode::None;
    PolicyMemory memory; // to pass to the next evaluation
};

inline constexpr int64_t kMinimumCoolingMs = 5 * 60 * 1000;
inline constexpr int64_t kGpuBusyGraceMs = 10 * 1000;
inline constexpr int64_t kGpuQuietMs = 60 * 1000;

// `now`: wall-clock time (the schedule is read in local time, so TZ
// applies, daylight-saving changes included).
Decision decide(const LimitSettings& settings, const Readings& readings, std::chrono::system_clock::time_point now,
    const PolicyMemory& memory);

// The schedule's cell for `t` in local time, and the next time the grid
// allows training at or after `t` (nullopt: never, an empty grid).
bool scheduleAllows(const std::string& schedule, std::time_t t);
std::optional<std::time_t> nextAllowed(const std::string& schedule, std::time_t t);

// The effective temperature limit: min(setting, slowdown - 5).
double temperatureLimit(const LimitSettings& settings, const GpuReading& gpu);

// Several GPUs training one task, as one reading the limits act on: the
// temperature (and slowdown) of the GPU closest to its limit, the highest
// power and utilization, and another program busy on any. At least one.
GpuReading closestToLimits(const LimitSettings& settings, const std::vector<GpuReading>& gpus);

} // namespace crowdtrain::limits
