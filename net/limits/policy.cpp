#include "net/limits/policy.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace crowdtrain::limits {
namespace {

int cellOf(const std::tm& local)
{
    const int monday0 = (local.tm_wday + 6) % 7;
    return monday0 * 24 + local.tm_hour;
}

std::tm localTime(std::time_t t)
{
    std::tm local{};
    localtime_r(&t, &local);
    return local;
}

std::string weekdayAndTime(std::time_t t)
{
    static const char* const names[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
    const std::tm local = localTime(t);
    char text[32];
    std::snprintf(text, sizeof text, "%s %02d:%02d", names[local.tm_wday % 7], local.tm_hour, local.tm_min);
    return text;
}

std::string minutesText(int64_t ms)
{
    const int64_t minutes = std::max<int64_t>(1, (ms + 59999) / 60000);
    return std::to_string(minutes) + (minutes == 1 ? " minute" : " minutes");
}

std::string degrees(double c)
{
    return std::to_string(int(std::lround(c))) + " \u00B0C";
}

Decision paused(control::LimitCode code, std::string limit, const PolicyMemory& memory)
{
    Decision d;
    d.run = false;
    d.busyTarget = 0;
    d.limit = std::move(limit);
    d.code = code;
    d.memory = memory;
    return d;
}

} // namespace

bool scheduleAllows(const std::string& schedule, std::time_t t)
{
    if (schedule.size() != 168)
        return true;
    return schedule[std::size_t(cellOf(localTime(t)))] == '1';
}

std::optional<std::time_t> nextAllowed(const std::string& schedule, std::time_t t)
{
    if (scheduleAllows(schedule, t))
        return t;
    // Walk hour by hour in real time, reading each instant's local hour, so
    // a day of 23 or 25 hours is handled as the calendar has it.
    const std::tm local = localTime(t);
    std::time_t next = t + (3600 - (local.tm_min * 60 + local.tm_sec));
    for (int i = 0; i < 170; ++i, next += 3600)
        if (scheduleAllows(schedule, next))
            return next;
    return std::nullopt;
}

double temperatureLimit(const LimitSettings& settings, const GpuReading& gpu)
{
    double limit = settings.maxGpuTemperatureC;
    if (gpu.slowdownC && *gpu.slowdownC > 0)
        limit = std::min(limit, *gpu.slowdownC - 5);
    return limit;
}

GpuReading closestToLimits(const LimitSettings& settings, const std::vector<GpuReading>& gpus)
{
    GpuReading worst = gpus.front();
    auto headroom = [&](const GpuReading& g) { return temperatureLimit(settings, g) - g.temperatureC; };
    for (const GpuReading& g : gpus) {
        if (headroom(g) < headroom(worst)) {
            worst.temperatureC = g.temperatureC;
            worst.slowdownC = g.slowdownC;
        }
        if (g.powerW && (!worst.powerW || *g.powerW > *worst.powerW))
            worst.powerW = g.powerW;
        if (g.utilization && (!worst.utilization || *g.utilization > *worst.utilization))
            worst.utilization = g.utilization;
        worst.othersBusy = worst.othersBusy || g.othersBusy;
    }
    return worst;
}

Decision decide(const LimitSettings& settings, const Readings& readings, std::chrono::system_clock::time_point now,
    const PolicyMemory& before)
{
    PolicyMemory memory = before;
    const int64_t nowMs = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
    const std::time_t t = std::chrono::system_clock::to_time_t(now);

    // The GPU's state is remembered whatever pauses first, so that a
    // temperature pause keeps its minimum length under a schedule pause.
    std::string gpuLimit;
    control::LimitCode gpuCode = control::LimitCode::None;
    if (readings.gpu) {
        const GpuReading& gpu = *readings.gpu;
        const double hot = temperatureLimit(settings, gpu);
        if (!memory.hotSinceMs && gpu.temperatureC > hot)
            memory.hotSinceMs = nowMs;
        if (memory.hotSinceMs) {
            const int64_t left = *memory.hotSinceMs + kMinimumCoolingMs - nowMs;
            if (gpu.temperatureC <= hot - 10 && left <= 0)
                memory.hotSinceMs.reset();
            else if (gpu.temperatureC > hot - 10) {
                gpuLimit = "GPU at " + degrees(gpu.temperatureC) + " (resumes at " + degrees(hot - 10) + ")";
                gpuCode = control::LimitCode::Temperature;
            } else {
                gpuLimit = "GPU cooling down (resumes in " + minutesText(left) + ")";
                gpuCode = control::LimitCode::Cooling;
            }
        }
        const double cap = settings.maxGpuPowerW;
        if (cap <= 0) {
            memory.powerSinceMs.reset();
        } else if (gpu.powerW) {
            if (!memory.powerSinceMs && *gpu.powerW > cap)
                memory.powerSinceMs = nowMs;
            if (memory.powerSinceMs) {
                const int64_t left = *memory.powerSinceMs + kMinimumCoolingMs - nowMs;
                if (*gpu.powerW <= 0.9 * cap && left <= 0)
                    memory.powerSinceMs.reset();
                else if (gpuLimit.empty()) {
                    gpuLimit = "GPU power over " + std::to_string(int(cap)) + " W (resumes in "
                        + minutesText(std::max<int64_t>(left, 0)) + ")";
                    gpuCode = control::LimitCode::Power;
                }
            }
        }
        if (!settings.pauseWhenGpuBusy) {
            memory = {memory.hotSinceMs, memory.powerSinceMs, {}, {}, false};
        } else if (gpu.othersBusy) {
            memory.othersQuietSinceMs.reset();
            if (!memory.othersBusySinceMs)
                memory.othersBusySinceMs = nowMs;
            if (nowMs - *memory.othersBusySinceMs >= kGpuBusyGraceMs)
                memory.gpuBusyPause = true;
        } else {
            memory.othersBusySinceMs.reset();
            if (memory.gpuBusyPause) {
                if (!memory.othersQuietSinceMs)
                    memory.othersQuietSinceMs = nowMs;
                if (nowMs - *memory.othersQuietSinceMs >= kGpuQuietMs) {
                    memory.gpuBusyPause = false;
                    memory.othersQuietSinceMs.reset();
                }
            }
        }
        if (gpuLimit.empty() && memory.gpuBusyPause) {
            gpuLimit = "another program is using the GPU";
            gpuCode = control::LimitCode::GpuBusy;
        }
    } else {
        memory = {};
    }

    if (!scheduleAllows(settings.schedule, t)) {
        const auto next = nextAllowed(settings.schedule, t);
        return paused(control::LimitCode::Schedule,
            next ? "outside the schedule (resumes " + weekdayAndTime(*next) + ")"
                 : std::string("outside the schedule (no hours are on)"),
            memory);
    }
    if (settings.pauseOnBattery && readings.onBattery.value_or(false))
        return paused(control::LimitCode::Battery, "on battery", memory);
    for (const std::string& program : settings.pausePrograms)
        if (!program.empty()
            && std::find(readings.programs.begin(), readings.programs.end(), program) != readings.programs.end())
            return paused(control::LimitCode::Program, program + " is running", memory);
    if (!gpuLimit.empty())
        return paused(gpuCode, gpuLimit, memory);
    if (settings.monthlyDataCapBytes > 0 && readings.monthBytes >= settings.monthlyDataCapBytes)
        return paused(control::LimitCode::DataCap, "this month's data cap is used up", memory);

    Decision d;
    d.memory = memory;
    d.inUse = readings.idleSeconds && *readings.idleSeconds < settings.inUseMinutes * 60.0;
    if (d.inUse && (settings.pauseWhenInUse || settings.busyShareInUse <= 0)) {
        Decision p = paused(control::LimitCode::InUse, "computer in use", memory);
        p.inUse = true;
        return p;
    }
    const int share = std::clamp(d.inUse ? settings.busyShareInUse : settings.busyShareIdle, 1, 100);
    d.busyTarget = share / 100.0;
    if (share < 100) {
        d.code = control::LimitCode::BusyShare;
        d.limit = "busy share " + std::to_string(share) + "% (computer " + (d.inUse ? "in use" : "idle") + ")";
    }
    return d;
}

} // namespace crowdtrain::limits
