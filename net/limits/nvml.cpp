#include "net/limits/nvml.h"

#include <algorithm>

#include <dlfcn.h>

#include <vector>

namespace crowdtrain::limits {
namespace {

// The few NVML types used here, as the C API declares them (nvml.h).
using Result = int; // nvmlReturn_t; 0 = NVML_SUCCESS
using Device = struct DeviceOpaque*;
struct Utilization {
    unsigned gpu;
    unsigned memory;
};
struct Memory {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
};
struct ProcessInfo { // nvmlProcessInfo_t (v2 and v3 layout)
    unsigned pid;
    unsigned long long usedGpuMemory;
    unsigned gpuInstanceId;
    unsigned computeInstanceId;
};
constexpr int kTemperatureGpu = 0; // NVML_TEMPERATURE_GPU
constexpr int kThresholdSlowdown = 1; // NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
constexpr Result kInsufficientSize = 7; // NVML_ERROR_INSUFFICIENT_SIZE

template <typename F> F symbol(void* handle, const char* name)
{
    return reinterpret_cast<F>(::dlsym(handle, name));
}

} // namespace

struct Nvml::Api {
    void* handle = nullptr;
    Result (*init)() = nullptr;
    Result (*shutdown)() = nullptr;
    Result (*count)(unsigned*) = nullptr;
    Result (*byIndex)(unsigned, Device*) = nullptr;
    Result (*name)(Device, char*, unsigned) = nullptr;
    Result (*memory)(Device, Memory*) = nullptr;
    Result (*temperature)(Device, int, unsigned*) = nullptr;
    Result (*threshold)(Device, int, unsigned*) = nullptr;
    Result (*power)(Device, unsigned*) = nullptr;
    Result (*utilization)(Device, Utilization*) = nullptr;
    Result (*computeProcesses)(Device, unsigned*, ProcessInfo*) = nullptr;
    Result (*graphicsProcesses)(Device, unsigned*, ProcessInfo*) = nullptr;

    std::optional<Device> device(unsigned index) const
    {
        Device d = nullptr;
        if (byIndex(index, &d) != 0)
            return std::nullopt;
        return d;
    }
};

std::unique_ptr<Nvml> Nvml::load(std::string& why, const char* library)
{
    void* handle = ::dlopen(library, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        why = std::string(kNotAvailable) + " (no NVIDIA driver: " + library + " could not be loaded)";
        return nullptr;
    }
    auto api = std::make_unique<Api>();
    api->handle = handle;
    api->init = symbol<decltype(api->init)>(handle, "nvmlInit_v2");
    api->shutdown = symbol<decltype(api->shutdown)>(handle, "nvmlShutdown");
    api->count = symbol<decltype(api->count)>(handle, "nvmlDeviceGetCount_v2");
    api->byIndex = symbol<decltype(api->byIndex)>(handle, "nvmlDeviceGetHandleByIndex_v2");
    api->name = symbol<decltype(api->name)>(handle, "nvmlDeviceGetName");
    api->memory = symbol<decltype(api->memory)>(handle, "nvmlDeviceGetMemoryInfo");
    api->temperature = symbol<decltype(api->temperature)>(handle, "nvmlDeviceGetTemperature");
    api->threshold = symbol<decltype(api->threshold)>(handle, "nvmlDeviceGetTemperatureThreshold");
    api->power = symbol<decltype(api->power)>(handle, "nvmlDeviceGetPowerUsage");
    api->utilization = symbol<decltype(api->utilization)>(handle, "nvmlDeviceGetUtilizationRates");
    api->computeProcesses = symbol<decltype(api->computeProcesses)>(handle, "nvmlDeviceGetComputeRunningProcesses_v3");
    if (!api->computeProcesses)
        api->computeProcesses
            = symbol<decltype(api->computeProcesses)>(handle, "nvmlDeviceGetComputeRunningProcesses_v2");
    api->graphicsProcesses
        = symbol<decltype(api->graphicsProcesses)>(handle, "nvmlDeviceGetGraphicsRunningProcesses_v3");
    if (!api->graphicsProcesses)
        api->graphicsProcesses
            = symbol<decltype(api->graphicsProcesses)>(handle, "nvmlDeviceGetGraphicsRunningProcesses_v2");
    if (!api->init || !api->shutdown || !api->count || !api->byIndex || !api->temperature || !api->utilization) {
        ::dlclose(handle);
        why = std::string(kNotAvailable) + " (the NVIDIA driver's NVML is too old)";
        return nullptr;
    }
    if (const Result r = api->init(); r != 0) {
        ::dlclose(handle);
        why = std::string(kNotAvailable) + " (NVML did not start: error " + std::to_string(r) + ")";
        return nullptr;
    }
    why.clear();
    return std::unique_ptr<Nvml>(new Nvml(std::move(api)));
}

Nvml::Nvml(std::unique_ptr<Api> api)
    : m_api(std::move(api))
{ }

Nvml::~Nvml()
{
    m_api->shutdown();
    ::dlclose(m_api->handle);
}

unsigned Nvml::deviceCount() const
{
    unsigned n = 0;
    return m_api->count(&n) == 0 ? n : 0;
}

std::optional<GpuInfo> Nvml::info(unsigned index) const
{
    const auto device = m_api->device(index);
    if (!device)
        return std::nullopt;
    GpuInfo info;
    char name[96] = {};
    if (m_api->name && m_api->name(*device, name, sizeof name) == 0)
        info.name = name;
    Memory memory{};
    if (m_api->memory && m_api->memory(*device, &memory) == 0) {
        info.memoryTotalBytes = memory.total;
        info.memoryFreeBytes = memory.free;
    }
    return info;
}

std::optional<GpuReading> Nvml::read(unsigned index, pid_t self) const
{
    const auto device = m_api->device(index);
    if (!device)
        return std::nullopt;
    GpuReading reading;
    unsigned value = 0;
    if (m_api->temperature(*device, kTemperatureGpu, &value) != 0)
        return std::nullopt;
    reading.temperatureC = value;
    if (m_api->threshold && m_api->threshold(*device, kThresholdSlowdown, &value) == 0)
        reading.slowdownC = value;
    if (m_api->power && m_api->power(*device, &value) == 0)
        reading.powerW = value / 1000.0;
    Utilization utilization{};
    if (m_api->utilization(*device, &utilization) == 0)
        reading.utilization = utilization.gpu / 100.0;
    for (auto list : {m_api->computeProcesses, m_api->graphicsProcesses}) {
        if (!list)
            continue;
        std::vector<ProcessInfo> infos(16);
        unsigned n = unsigned(infos.size());
        Result r = list(*device, &n, infos.data());
        if (r == kInsufficientSize) {
            infos.resize(n + 8);
            n = unsigned(infos.size());
            r = list(*device, &n, infos.data());
        }
        if (r != 0)
            continue;
        for (unsigned i = 0; i < n && i < infos.size(); ++i)
            if (pid_t(infos[i].pid) != self && infos[i].usedGpuMemory >= kHeavyUseBytes
                && infos[i].usedGpuMemory != ~0ULL)
                reading.othersBusy = true;
    }
    return reading;
}

std::string gpuLabel(const std::vector<GpuInfo>& gpus)
{
    std::vector<std::pair<std::string, int>> kinds; // in the order first seen
    for (const GpuInfo& gpu : gpus) {
        const uint64_t gib = (gpu.memoryTotalBytes + (uint64_t(1) << 29)) >> 30; // rounded
        const std::string name = (gpu.name.empty() ? std::string("NVIDIA GPU") : gpu.name)
            + (gib > 0 ? ", " + std::to_string(gib) + " GiB" : std::string());
        auto it = std::find_if(kinds.begin(), kinds.end(), [&](const auto& k) { return k.first == name; });
        if (it == kinds.end())
            kinds.emplace_back(name, 1);
        else
            ++it->second;
    }
    std::string label;
    for (const auto& [name, count] : kinds)
        label += (label.empty() ? "" : " + ") + (count > 1 ? std::to_string(count) + " x " : std::string()) + name;
    return label;
}

} // namespace crowdtrain::limits
