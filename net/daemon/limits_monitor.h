#pragma once

// The daemon's side of the limits (net/limits): it reads the machine (battery,
// input idle, running programs every 2 s; NVML at every poll when present),
// keeps this month's network usage (<dataDir>/data_usage.json, counted by
// the NetworkThrottle the agent's connections pass through), evaluates the
// policy and says in plain words which limit acts, for the status's `limit`
// and `limits` (docs/protocol.md 12.2).
//
// Thread-safety: evaluate() runs on one thread at a time (the poller's
// beat) and may be slow (NVML, a scan of /proc, an fsynced write of
// data_usage.json); it publishes what it found at its end. Everything else
// may be called from any thread meanwhile and answers at once from the
// last published evaluation, so the status never waits for the machine.

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
#include <mutex>
#include <optional>

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
    // What the last evaluation decided.
    limits::Decision decision() const;
    // The last GPU temperature read (nullopt without NVML).
    std::optional<double> gpuTemperatureC() const;

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
    // What the readers see: a copy taken at the end of each evaluation.
    struct Published {
        limits::Decision decision;
        std::optional<limits::GpuReading> gpu;
        double temperatureLimitC = 0; // of `gpu`
        std::optional<bool> onBattery;
        std::string idleSource;
        std::string month;
        uint64_t monthBytes = 0;
        uint64_t monthlyDataCapBytes = 0;
    };

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

    std::mutex m_evaluateMutex; // one evaluation at a time
    mutable std::mutex m_publishedMutex; // guards m_published only; never held across a reading
    Published m_published;
};

} // namespace crowdtrain::daemon
