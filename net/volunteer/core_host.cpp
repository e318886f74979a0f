#include "net/volunteer/core_host.h"
#include "core/thread_name.h"

namespace crowdtrain::volunteer {

CoreHost::CoreHost(CoreHostOptions options, std::function<void(const std::string&)> log)
    : m_options(std::move(options))
    , m_log(std::move(log))
{
    if (m_options.cpuCore.empty())
        m_options.cpuCore = corelink::defaultCoreBinary();
    if (m_options.cudaCore.empty())
        m_options.cudaCore = corelink::defaultCudaCoreBinary();
}

std::string CoreHost::cudaRefusal() const
{
    std::lock_guard lock(m_infoMutex);
    return m_cudaRefusal;
}

// The CUDA core when it is wanted, installed, starts and finds a device
// (a driver too old for its CUDA runtime finds none: its note says so);
// else the CPU core.
Result<std::unique_ptr<corelink::CoreProcess>> CoreHost::startBest()
{
    std::error_code ec;
    if (m_options.tryCuda && cudaRefusal().empty() && std::filesystem::exists(m_options.cudaCore, ec)) {
        auto cuda = corelink::CoreProcess::start({.binary = m_options.cudaCore,
            .helloTimeoutMs = m_options.helloTimeoutMs,
            .nice = corelink::kTrainingGpuNice});
        std::string why;
        if (!cuda) {
            why = cuda.error().message;
        } else {
            for (const std::string& device : (*cuda)->hello().devices)
                if (device != "cpu")
                    return cuda;
            why = (*cuda)->hello().note.empty() ? "it finds no GPU" : (*cuda)->hello().note;
            (*cuda)->stop();
        }
        {
            std::lock_guard lock(m_infoMutex);
            m_cudaRefusal = why;
        }
        if (m_log)
            m_log("the CUDA core cannot train on this machine (" + why + "); training on the CPU core");
    }
    return corelink::CoreProcess::start(
        {.binary = m_options.cpuCore, .helloTimeoutMs = m_options.helloTimeoutMs, .nice = corelink::kTrainingCpuNice});
}

CoreHost::~CoreHost()
{
    std::lock_guard lock(m_mutex);
    if (m_process)
        stopLocked("the volunteer agent stopped");
    if (m_reaper.joinable())
        m_reaper.join();
}

Result<CoreHost::Lease> CoreHost::lease()
{
    std::unique_lock lock(m_mutex);
    m_releaseWanted = false;
    if (m_reaper.joinable())
        m_reaper.join(); // the last core has left the device before a new one comes
    if (!m_process) {
        auto started = startBest();
        if (!started)
            return started.error();
        m_process = std::move(*started);
        ++m_starts;
        m_running = true;
        const corelink::CoreHello& h = m_process->hello();
        {
            std::lock_guard helloLock(m_infoMutex);
            m_hello = h;
        }
        std::string devices;
        for (const std::string& d : h.devices)
            devices += (devices.empty() ? "" : ", ") + d;
        if (m_log)
            m_log("training core started (pid " + std::to_string(m_process->pid()) + "): " + h.family + " core, "
                + h.runtime + "; devices " + devices + (h.note.empty() ? "" : "; " + h.note));
    }
    return Lease(this, std::move(lock));
}

CoreHost::Lease::~Lease()
{
    if (m_lock.owns_lock() && m_host->m_releaseWanted.exchange(false) && m_host->m_process) {
        std::string why;
        {
            std::lock_guard info(m_host->m_infoMutex);
            why = m_host->m_releaseWhy;
        }
        m_host->stopLocked(why);
    }
}

std::string CoreHost::Lease::discard(bool killFirst)
{
    if (!m_host->m_process)
        return "was not running";
    if (killFirst)
        m_host->m_process->kill();
    const std::string how = m_host->m_process->ended();
    m_host->m_process.reset();
    m_host->m_running = false;
    if (m_host->m_log)
        m_host->m_log("training core " + how);
    return how;
}

void CoreHost::release(const std::string& why)
{
    std::unique_lock lock(m_mutex, std::try_to_lock);
    if (!lock.owns_lock()) {
        {
            std::lock_guard info(m_infoMutex);
            m_releaseWhy = why;
        }
        m_releaseWanted = true;
        return;
    }
    if (!m_process)
        return;
    // Off the caller's thread (the daemon's, which answers status): a core
    // may take a moment to let go of its device.
    if (m_reaper.joinable())
        m_reaper.join();
    m_running = false;
    m_reaper = std::thread([this, process = std::move(m_process), why]() mutable {
        core::nameThisThread("core-reaper");
        const std::string how = process->stop();
        if (m_log)
            m_log("training core stopped (" + why + "): it " + how + "; its device memory is free");
    });
}

void CoreHost::stopLocked(const std::string& why)
{
    const std::string how = m_process->stop();
    m_process.reset();
    m_running = false;
    if (m_log)
        m_log("training core stopped (" + why + "): it " + how + "; its device memory is free");
}

corelink::CoreHello CoreHost::hello() const
{
    std::lock_guard lock(m_infoMutex);
    return m_hello;
}

} // namespace crowdtrain::volunteer
