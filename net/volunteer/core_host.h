#pragma once

// The volunteer's training core (crowdtrain-core, docs/protocol.md §13), as
// the agent sees it: started when a request needs it, kept between tasks so
// that AdamW's moments carry over, restarted after a failure (the agent's
// backoff spaces the tries), and ended on request so that a long pause, a
// snooze, the schedule or a game on the GPU leaves the device's memory all
// free. One request at a time: a Lease holds the core for one.
//
// Thread-safe: lease() from the agent's threads, release() from any thread
// (the daemon's limits), which ends an idle core at once and a busy one when
// its lease ends.

#include "core/result.h"
#include "net/core_link/core_process.h"

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace crowdtrain::volunteer {

struct CoreHostOptions {
    std::filesystem::path cpuCore{}; // empty: corelink::defaultCoreBinary()
    std::filesystem::path cudaCore{}; // empty: corelink::defaultCudaCoreBinary()
    // Try the CUDA core first (the settings allow a GPU and NVML sees one):
    // it is used when it starts and lists a CUDA device; else, once and with
    // its reason logged, the CPU core.
    bool tryCuda = false;
    int helloTimeoutMs = 60000;
};

class CoreHost {
public:
    CoreHost(CoreHostOptions options, std::function<void(const std::string&)> log);
    ~CoreHost();
    CoreHost(const CoreHost&) = delete;
    CoreHost& operator=(const CoreHost&) = delete;

    class Lease {
    public:
        corelink::CoreProcess& core() { return *m_host->m_process; }
        // The request failed in a way that leaves the core unusable (it
        // died, hung or sent garbage): ends it, logs how, and returns the words.
        std::string discard(bool killFirst);
        ~Lease();
        Lease(Lease&&) = default;

    private:
        friend class CoreHost;
        Lease(CoreHost* host, std::unique_lock<std::mutex> lock)
            : m_host(host)
            , m_lock(std::move(lock))
        { }
        CoreHost* m_host;
        std::unique_lock<std::mutex> m_lock;
    };

    // The running core, started now if none is. Error "core_failed".
    Result<Lease> lease();
    // Ends the core now if no request holds it, else when its lease ends.
    void release(const std::string& why);
    bool running() const { return m_running.load(); }
    // The last core's hello (empty before the first start).
    corelink::CoreHello hello() const;
    uint64_t starts() const { return m_starts.load(); }
    // Why the CUDA core is not used ("" when it is, or was not tried).
    std::string cudaRefusal() const;

private:
    void stopLocked(const std::string& why);
    Result<std::unique_ptr<corelink::CoreProcess>> startBest();

    CoreHostOptions m_options;
    std::function<void(const std::string&)> m_log;
    std::mutex m_mutex; // held by a lease for its request
    std::unique_ptr<corelink::CoreProcess> m_process;
    mutable std::mutex m_infoMutex; // m_hello, m_releaseWhy
    corelink::CoreHello m_hello;
    std::atomic<bool> m_running{false};
    std::atomic<bool> m_releaseWanted{false};
    std::atomic<uint64_t> m_starts{0};
    std::string m_releaseWhy;
    std::string m_cudaRefusal; // (m_infoMutex) set once the CUDA core was found unusable
    std::thread m_reaper; // ends a released core off the releasing thread
};

} // namespace crowdtrain::volunteer
