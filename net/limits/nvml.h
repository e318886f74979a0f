#pragma once

// NVIDIA's management library, loaded at run time (dlopen of
// libnvidia-ml.so.1), so the daemon runs on machines with no NVIDIA driver.
// Without it, Nvml::load says why in plain words and every GPU limit reads
// "not available on this machine".
//
// Thread-safe (NVML is); one instance per process.

#include "net/limits/policy.h"

#include <memory>
#include <optional>
#include <string>
#include <sys/types.h>
#include <vector>

namespace crowdtrain::limits {

struct GpuInfo {
    std::string name;
    uint64_t memoryTotalBytes = 0;
    uint64_t memoryFreeBytes = 0;
};

class Nvml {
public:
    // nullptr when NVML cannot be used here; `why` then says so for a person.
    static std::unique_ptr<Nvml> load(std::string& why, const char* library = "libnvidia-ml.so.1");
    ~Nvml();
    Nvml(const Nvml&) = delete;
    Nvml& operator=(const Nvml&) = delete;

    unsigned deviceCount() const;
    std::optional<GpuInfo> info(unsigned index) const;
    // Temperature, slowdown threshold, power, utilisation, and whether a
    // process other than `self` holds >= 512 MiB of the GPU's memory (a game,
    // another trainer, a renderer): what the policy needs.
    std::optional<GpuReading> read(unsigned index, pid_t self) const;

    static constexpr uint64_t kHeavyUseBytes = uint64_t(512) << 20;

private:
    struct Api;
    explicit Nvml(std::unique_ptr<Api> api);
    std::unique_ptr<Api> m_api;
};

inline constexpr const char* kNotAvailable = "not available on this machine";

// How a volunteer's GPUs are named to a project (join's `device`): "NVIDIA
// GeForce RTX 4090, 24 GiB"; several: "2 x NVIDIA H100 80GB HBM3, 80 GiB",
// different kinds joined by " + ". Empty for none.
std::string gpuLabel(const std::vector<GpuInfo>& gpus);

} // namespace crowdtrain::limits
