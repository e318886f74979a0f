#pragma once

// The joined project's lifecycle: which hub and project are joined, whether
// the volunteer paused or snoozed it, the runner that trains it, the pause
// gate the limits and text generation hold, and daemon.json, which keeps
// all of it (with the followed hubs) across restarts.
//
// Thread-safety: every function may be called from any thread. m_mutex
// guards the fields below and is never held across a hub call, the start
// of the demo hub, a file write, a reading of the machine (the limits' NVML,
// /proc and usage file: tick() evaluates them first, then takes the lock)
// or the stop of an agent, so status reads answer in milliseconds whatever
// else is going on. The changes (join,
// leave, pause, snooze, persist) come from the control API's "changes"
// queue, one at a time; tick() from the poller.

#include "net/daemon/daemon_state_file.h"
#include "net/daemon/history_cache.h"
#include "net/daemon/hub_resolver.h"
#include "net/daemon/limits_monitor.h"
#include "net/daemon/live_settings.h"
#include "net/daemon/log_ring.h"
#include "net/daemon/project_runner.h"
#include "net/daemon/status_words.h"

#include <functional>
#include <memory>
#include <mutex>
#include <optional>

namespace crowdtrain::daemon {

struct JoinedProjectParts {
    std::filesystem::path dataDir;
    HubDirectory& hubs;
    HubResolver& resolver;
    LimitsMonitor& limits;
    LiveSettings& settings;
    HistoryCache& history;
    LogRing& log;
    std::function<swarm::SwarmSession*()> swarm; // for the agent's full states (may return null)
    std::function<bool()> swarmSeeding;
};

class JoinedProject {
public:
    // What is joined; `runner` once its agent runs.
    struct Joined {
        std::string hub; // a hub link, "demo", or ""
        std::string project;
        std::optional<ProjectRunner::Target> runner;
    };

    explicit JoinedProject(JoinedProjectParts parts);
    ~JoinedProject(); // stops the agent at a step boundary
    // Stops the agent at a step boundary and waits for it; the project stays
    // (its callbacks may still ask it things meanwhile).
    void stopAgent();

    // Reads daemon.json (the followed hubs go to the directory); true when
    // a project is joined, to resume().
    bool load();
    // Starts the joined project's runner (the demo hub first, when it is
    // the demo's): after load().
    void resume();
    Status join(const std::string& hub, const std::string& project);
    Result<control::Value> leave();
    Result<control::Value> pause(bool paused);
    Result<control::Value> snooze(int64_t seconds);
    // Writes daemon.json now (the followed hubs changed).
    Status persist();
    // Text generation holds training (when the settings say so).
    void setGenerating(bool on);

    // The poller's beat: ends an expired snooze, evaluates the limits and
    // applies them to the gate; then what the status says.
    StatusInputs tick();
    StatusInputs inputs() const;
    Joined joined() const;

    // A pause this long gives the device back (the training core exits).
    static constexpr int64_t kReleaseDeviceAfterPauseMs = 60 * 1000;

private:
    // With m_mutex held.
    SavedState savedLocked() const;
    Status startRunnerLocked(const std::string& hubText, const HubLink& hub, const std::string& project);
    void refreshPausedLocked();
    StatusInputs inputsLocked() const;

    JoinedProjectParts m_parts;
    DaemonStateFile m_stateFile;
    PauseGate m_gate;

    mutable std::mutex m_mutex;
    std::unique_ptr<ProjectRunner> m_runner;
    std::string m_joinedHub; // a hub link, or "demo"
    std::string m_joinedProject;
    bool m_userPaused = false;
    bool m_generating = false;
    int64_t m_snoozeUntilMs = 0;
    int64_t m_pausedSinceMs = 0; // when the current pause began (0: running)
};

} // namespace crowdtrain::daemon
