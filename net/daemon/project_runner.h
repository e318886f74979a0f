#pragma once

// The joined project, trained: a VolunteerAgent (net/volunteer) on a thread
// of its own, with a PauseGate that holds training at a step boundary (the
// task's weights, optimizer state and data position stay in memory while
// heartbeats go on) or before the next task, and between steps rests as the
// busy-share governor (net/limits/governor.h) asks. The agent keeps its
// state on disk (theta_v, residual, pending work), so a restarted daemon
// resumes.
//
// Thread-safety: construct, stop and destroy on one thread (the daemon's);
// summary() and failure() from any thread. The destructor stops and joins.

#include "net/daemon/hub_link.h"
#include "net/limits/governor.h"
#include "net/volunteer/agent.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

namespace crowdtrain::daemon {

class PauseGate {
public:
    void setPaused(bool paused);
    bool paused() const;
    // The governor's target share of wall time busy (0.01..1).
    void setBusyTarget(double share);
    // The busy share the governor measured over its window.
    double measuredBusy() const;
    // Blocks while paused, until `released()` says otherwise.
    void wait(const std::function<bool()>& released);
    // After a step that was busy `stepMs`: rests as the governor asks, then
    // waits while paused; returns early once `released()`.
    void afterStep(double stepMs, const std::function<bool()>& released);
    // Wakes the waiters to look at `released` again.
    void wake();
    // How many threads a pause holds now (0 or 1: the agent's).
    int held() const;

private:
    mutable std::mutex m_mutex;
    std::condition_variable m_changed;
    bool m_paused = false;
    int m_held = 0;
    limits::BusyGovernor m_governor;
};

class ProjectRunner {
public:
    struct Target {
        HubLink hub;
        std::string hubLink;
        std::string project;
    };

    // Starts training at once (subject to the gate).
    ProjectRunner(Target target, volunteer::AgentOptions options, PauseGate& gate);
    ~ProjectRunner();
    ProjectRunner(const ProjectRunner&) = delete;
    ProjectRunner& operator=(const ProjectRunner&) = delete;

    const Target& target() const { return m_target; }
    // While set, the device is given back: the training core exits (the
    // task in hand wraps up first) and starts again once cleared and the
    // gate opens. Any thread.
    void releaseDevice(bool release, const std::string& why);
    bool coreRunning() const { return m_agent.coreRunning(); }
    volunteer::AgentSummary summary() const { return m_agent.summary(); }
    bool running() const;
    // The error the agent stopped with (a bad key, an unknown project, ...).
    std::optional<Error> failure() const;

private:
    Target m_target;
    PauseGate& m_gate;
    std::atomic<bool> m_release{false}; // the device is to be given back
    volunteer::VolunteerAgent m_agent;
    mutable std::mutex m_mutex;
    bool m_running = true;
    std::optional<Error> m_failure;
    std::thread m_thread;
};

} // namespace crowdtrain::daemon
