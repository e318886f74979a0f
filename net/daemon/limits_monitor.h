#pragma once

// The daemon's side of the limits (net/limits): it reads the machine (battery,
// input idle, running programs every 2 s; NVML at every poll when present),
// keeps this month's network usage (<dataDir>/data_usage.json, counted by
// the NetworkThrottle the agent's connections pass through), evaluates the
// policy and says in plain words which limit acts, for the status's `limit`
// and `limits` (docs/protocol.md 12.2).
//
// Not thread-safe: the daemon calls it with its mutex held.

#include "net/control/value.h"
#include "net/daemon/settings.h"
#include "net/limits/machine.h"
#include "net/limits/nvml.h"
#include "net/limits/policy.h"
#include "net/limits/throttle.h"

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>

namespace crowdtrain::daemon {

struct MachineProbes {
    std::filesystem::path powerSupplies = "/sys/class/power_supply";
    std::filesystem::path inputDir = "/dev/input";
    std::filesystem::path proc = "/proc";
    const char* nvmlLibrary = "libnvidia-ml.so.1";
};

class LimitsMonitor {
public:
    LimitsMonitor(std::filesystem::path dataDir, MachineProbes probes = {});
    // What was done about an unusable data_usage.json at start ("" if nothing).
    const std::string& startNotice() const { return m_startNotice; }

    // Reads what is due and decides; `now` is the wall clock.
    limits::Decision evaluate(const Settings& settings, std::chrono::system_clock::time_point now);
    const limits::Decision& decision() const { return m_decision; }
    // The last GPU temperature read (nullopt without NVML).
    std::optional<double> gpuTemperatureC() const
    {
        return m_readings.gpu ? std::optional<double>(m_readings.gpu->temperatureC) : std::nullopt;
    }

    // {busy_target, busy_measured, in_use, on_battery, idle_source, month,
    //  month_bytes, month_cap_bytes, upload_limit_bytes_s, download_limit_bytes_s,
    //  gpu: {available, why?, temperature_c?, temperature_limit_c?, power_w?, utilization?}}
    control::Value report(double busyMeasured, const Settings& settings) const;

    std::shared_ptr<limits::NetworkThrottle> throttle() const { return m_throttle; }
    // The chosen GPU's total memory and the budget the settings give it
    // (of a team's GPUs, the smallest's; {0, 0} without NVML: no cap can be
    // known).
    std::pair<uint64_t, uint64_t> gpuMemory(const Settings& settings) const;
    // The CUDA device the settings choose ("cuda:N"), or "" for the first.
    static std::string cudaDevice(const Settings& settings);
    // The CUDA devices a task trains across ("cuda:0", "cuda:1"): those
    // gpu_devices lists, or with "all" every GPU NVML counts; empty when
    // fewer than two (one device: cudaDevice()).
    std::vector<std::string> cudaDevices(const Settings& settings) const;
    // The GPUs training uses, named for the project (limits::gpuLabel); ""
    // without NVML.
    std::string gpuLabel(const Settings& settings) const;

private:
    void countTraffic(std::chrono::system_clock::time_point now);
    // The NVML numbers of the GPUs training uses: a team's, else the one.
    std::vector<unsigned> trainingGpus(const Settings& settings) const;

    std::filesystem::path m_usageFile;
    MachineProbes m_probes;
    std::unique_ptr<limits::Nvml> m_nvml;
    std::string m_nvmlWhy;
    std::string m_startNotice;
    std::shared_ptr<limits::NetworkThrottle> m_throttle = std::make_shared<limits::NetworkThrottle>();

    limits::Readings m_readings;
    std::string m_idleSource;
    std::chrono::steady_clock::time_point m_nextMachineRead{};
    limits::Decision m_decision;
    limits::LimitSettings m_limits;

    std::string m_month; // "2026-11", local time
    uint64_t m_monthBytes = 0;
    uint64_t m_countedTotal = 0; // of m_throttle->totalBytes()
    uint64_t m_savedBytes = 0;
};

} // namespace crowdtrain::daemon
