#include "net/daemon/limits_monitor.h"

#include "core/file_io.h"
#include "net/daemon/state_file.h"
#include "net/limits/memory.h"

#include <nlohmann/json.hpp>
#include <unistd.h>

#include <ctime>

namespace crowdtrain::daemon {
namespace {

using control::Value;
using json = nlohmann::json;

constexpr auto kMachineReadEvery = std::chrono::seconds(2);
constexpr uint64_t kSaveEveryBytes = uint64_t(1) << 20;

std::string monthOf(std::chrono::system_clock::time_point now)
{
    const std::time_t t = std::chrono::system_clock::to_time_t(now);
    std::tm local{};
    localtime_r(&t, &local);
    char text[32];
    std::snprintf(text, sizeof text, "%04d-%02d", local.tm_year + 1900, local.tm_mon + 1);
    return text;
}

limits::LimitSettings limitSettings(const Settings& s)
{
    limits::LimitSettings l;
    l.busyShareInUse = int(s.get(control::setting::kBusyShareInUse));
    l.busyShareIdle = int(s.get(control::setting::kBusyShareIdle));
    l.pauseWhenInUse = s.get(control::setting::kPauseWhenInUse);
    l.inUseMinutes = int(s.get(control::setting::kInUseMinutes));
    l.pauseOnBattery = s.get(control::setting::kPauseOnBattery);
    l.pausePrograms = limits::splitList(s.get(control::setting::kPausePrograms));
    l.pauseWhenGpuBusy = s.get(control::setting::kPauseWhenGpuBusy);
    l.maxGpuTemperatureC = int(s.get(control::setting::kMaxGpuTemperatureC));
    l.maxGpuPowerW = int(s.get(control::setting::kMaxGpuPowerW));
    l.schedule = s.get(control::setting::kSchedule);
    l.monthlyDataCapBytes = uint64_t(s.get(control::setting::kMonthlyDataCapMib)) << 20;
    return l;
}

unsigned gpuIndex(const Settings& settings)
{
    const auto listed = limits::splitList(settings.get(control::setting::kGpuDevices));
    if (listed.empty() || listed.front() == "all")
        return 0;
    return unsigned(std::stoul(listed.front()));
}

} // namespace

LimitsMonitor::LimitsMonitor(std::filesystem::path dataDir, MachineProbes probes)
    : m_usageFile(dataDir / "data_usage.json")
    , m_probes(std::move(probes))
{
    m_nvml = limits::Nvml::load(m_nvmlWhy, m_probes.nvmlLibrary);
    const auto usage = readStateFile(
        m_usageFile, 4096,
        [](const json& root) {
            for (const std::string& why : {expectString(root, "month"), expectUnsigned(root, "bytes")})
                if (!why.empty())
                    return why;
            return root["month"].get<std::string>().size() == 7 ? std::string()
                                                                : std::string("\"month\" is not YYYY-MM");
        },
        m_startNotice);
    if (usage) {
        m_month = (*usage)["month"].get<std::string>();
        m_monthBytes = (*usage)["bytes"].get<uint64_t>();
        m_savedBytes = m_monthBytes;
    }
    m_published.month = m_month;
    m_published.monthBytes = m_monthBytes;
    m_published.idleSource = m_idleSource;
}

limits::Decision LimitsMonitor::decision() const
{
    std::lock_guard lock(m_publishedMutex);
    return m_published.decision;
}

std::optional<double> LimitsMonitor::gpuTemperatureC() const
{
    std::lock_guard lock(m_publishedMutex);
    return m_published.gpu ? std::optional<double>(m_published.gpu->temperatureC) : std::nullopt;
}

std::string LimitsMonitor::cudaDevice(const Settings& settings)
{
    const std::string list = settings.get(control::setting::kGpuDevices);
    return list == "all" ? std::string() : "cuda:" + std::to_string(gpuIndex(settings));
}

std::vector<std::string> LimitsMonitor::cudaDevices(const Settings& settings) const
{
    std::vector<std::string> devices;
    const auto listed = limits::splitList(settings.get(control::setting::kGpuDevices));
    if (listed.size() == 1 && listed.front() == "all") {
        for (unsigned i = 0; m_nvml && i < m_nvml->deviceCount(); ++i)
            devices.push_back("cuda:" + std::to_string(i));
    } else {
        for (const std::string& index : listed)
            devices.push_back("cuda:" + index);
    }
    if (devices.size() < 2)
        devices.clear();
    return devices;
}

std::vector<unsigned> LimitsMonitor::trainingGpus(const Settings& settings) const
{
    std::vector<unsigned> indices;
    for (const std::string& device : cudaDevices(settings))
        indices.push_back(unsigned(std::stoul(device.substr(5))));
    if (indices.empty())
        indices.push_back(gpuIndex(settings));
    return indices;
}

std::string LimitsMonitor::gpuLabel(const Settings& settings) const
{
    if (!m_nvml)
        return {};
    std::vector<limits::GpuInfo> gpus;
    for (unsigned index : trainingGpus(settings))
        if (auto info = m_nvml->info(index))
            gpus.push_back(*info);
    return limits::gpuLabel(gpus);
}

std::pair<uint64_t, uint64_t> LimitsMonitor::gpuMemory(const Settings& settings) const
{
    if (!m_nvml)
        return {0, 0};
    // A team of GPUs plans with its smallest.
    std::pair<uint64_t, uint64_t> smallest{0, 0};
    for (unsigned index : trainingGpus(settings)) {
        const auto info = m_nvml->info(index);
        if (!info || info->memoryTotalBytes == 0)
            return {0, 0};
        if (smallest.first == 0 || info->memoryTotalBytes < smallest.first)
            smallest = {info->memoryTotalBytes,
                limits::memoryBudget(info->memoryTotalBytes,
                    uint64_t(settings.get(control::setting::kGpuMemoryLimitMib)),
                    uint64_t(settings.get(control::setting::kGpuMemoryFreeMib)))};
    }
    return smallest;
}

void LimitsMonitor::countTraffic(std::chrono::system_clock::time_point now)
{
    const std::string month = monthOf(now);
    const uint64_t total = m_throttle->totalBytes();
    const uint64_t added = total - m_countedTotal;
    m_countedTotal = total;
    bool save = false;
    if (month != m_month) {
        m_month = month;
        m_monthBytes = 0;
        save = true;
    }
    m_monthBytes += added;
    save = save || m_monthBytes >= m_savedBytes + kSaveEveryBytes;
    if (save) {
        const json usage = {{"month", m_month}, {"bytes", m_monthBytes}};
        if (core::writeFileAtomic(m_usageFile, usage.dump() + "\n", 0600))
            m_savedBytes = m_monthBytes;
    }
}

limits::Decision LimitsMonitor::evaluate(const Settings& settings, std::chrono::system_clock::time_point now)
{
    std::lock_guard evaluating(m_evaluateMutex);
    m_limits = limitSettings(settings);
    m_throttle->setRates(uint64_t(settings.get(control::setting::kUploadLimitKibS)) * 1024,
        uint64_t(settings.get(control::setting::kDownloadLimitKibS)) * 1024);
    countTraffic(now);
    const auto steady = std::chrono::steady_clock::now();
    if (steady >= m_nextMachineRead) {
        m_nextMachineRead = steady + kMachineReadEvery;
        m_readings.onBattery = limits::onBattery(m_probes.powerSupplies);
        const auto idle = limits::inputIdle(now, m_probes.inputDir);
        m_readings.idleSeconds = idle ? std::optional<double>(idle->seconds) : std::nullopt;
        m_idleSource = idle ? idle->source : "none (no input device can be read here: counted as idle)";
        if (!m_limits.pausePrograms.empty())
            m_readings.programs = limits::runningPrograms(m_probes.proc);
        else
            m_readings.programs.clear();
    }
    m_readings.gpu.reset();
    if (m_nvml) {
        // A team's GPUs act as one: the limits follow the one closest to them.
        std::vector<limits::GpuReading> read;
        for (unsigned index : trainingGpus(settings))
            if (auto reading = m_nvml->read(index, ::getpid()))
                read.push_back(*reading);
        if (!read.empty())
            m_readings.gpu = limits::closestToLimits(m_limits, read);
    }
    m_readings.monthBytes = m_monthBytes;
    m_throttle->setCapReached(m_limits.monthlyDataCapBytes > 0 && m_monthBytes >= m_limits.monthlyDataCapBytes);
    m_decision = limits::decide(m_limits, m_readings, now, m_decision.memory);
    Published published{m_decision, m_readings.gpu,
        m_readings.gpu ? limits::temperatureLimit(m_limits, *m_readings.gpu) : 0.0, m_readings.onBattery, m_idleSource,
        m_month, m_monthBytes, m_limits.monthlyDataCapBytes};
    {
        std::lock_guard lock(m_publishedMutex);
        m_published = std::move(published);
    }
    return m_decision;
}

Value LimitsMonitor::report(double busyMeasured, const Settings& settings) const
{
    Published p;
    {
        std::lock_guard lock(m_publishedMutex);
        p = m_published;
    }
    Value v = Value::map();
    v.set("busy_target", p.decision.run ? p.decision.busyTarget : 0.0).set("busy_measured", busyMeasured);
    v.set("in_use", p.decision.inUse).set("idle_source", p.idleSource);
    v.set("on_battery", p.onBattery ? Value(*p.onBattery) : Value());
    v.set("month", p.month).set("month_bytes", p.monthBytes).set("month_cap_bytes", p.monthlyDataCapBytes);
    v.set("upload_limit_bytes_s", uint64_t(settings.get(control::setting::kUploadLimitKibS)) * 1024);
    v.set("download_limit_bytes_s", uint64_t(settings.get(control::setting::kDownloadLimitKibS)) * 1024);
    Value gpu = Value::map();
    gpu.set("available", p.gpu.has_value());
    if (!p.gpu) {
        gpu.set("why", m_nvml ? std::string("NVML gives no readings for this GPU") : m_nvmlWhy);
    } else {
        const limits::GpuReading& r = *p.gpu;
        gpu.set("temperature_c", r.temperatureC).set("temperature_limit_c", p.temperatureLimitC);
        gpu.set("power_w", r.powerW ? Value(*r.powerW) : Value());
        gpu.set("utilization", r.utilization ? Value(*r.utilization) : Value());
        gpu.set("others_busy", r.othersBusy);
    }
    v.set("gpu", std::move(gpu));
    return v;
}

} // namespace crowdtrain::daemon
