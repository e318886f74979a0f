#pragma once

// The volunteer daemon (`crowdtrain-worker run`): the one process per user
// that talks to coordinators. It owns the pieces below and serves the
// control API (docs/protocol.md, section 12) that the desktop app and the
// command-line client drive:
//   Settings        typed settings, persisted             settings.h
//   HubDirectory    followed hubs and their projects      hub_directory.h
//   ProjectRunner   the joined project, trained           project_runner.h
//   DemoHub         the built-in demo coordinator         demo_hub.h
//   Checkpoints     downloads and text generation         checkpoints.h
//   LimitsMonitor   busy share, schedule, battery, ...    limits_monitor.h
//   ControlServer   the control API's sockets             net/control
// Its own state (followed hubs, the joined project, paused or not) is in
// <dataDir>/daemon.json, written atomically on every change, so a restart
// resumes where it was; the agent's own files resume the task in hand.
//
// Threads, each owned here and joined by the destructor: the control
// thread (run(): requests, one at a time), the poller (status events,
// the catalog, metrics, auto-downloads), the runner's agent thread, and
// the checkpoint worker. m_mutex guards the daemon's state; every wait
// wakes on stop().

#include "engine/result.h"
#include "net/control/control_server.h"
#include "net/daemon/checkpoints.h"
#include "net/daemon/demo_hub.h"
#include "net/daemon/hub_directory.h"
#include "net/daemon/limits_monitor.h"
#include "net/daemon/project_runner.h"
#include "net/daemon/settings.h"

#include <condition_variable>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>

namespace crowdtrain::daemon {

struct DaemonOptions {
    std::filesystem::path dataDir; // identity, state, caches, checkpoints
    std::filesystem::path configDir; // settings.json
    std::filesystem::path controlDir; // the control API's sockets
    std::filesystem::path serverBinary; // crowdtrain-server, for the demo hub
    std::filesystem::path demoCorpusDir = "/usr/share/games/fortunes";
    std::function<void(const std::string&)> log; // also sent as "log" events
    int pollMs = 500; // status events and the runner's health
    int hubRefreshMs = 5000; // catalog and metrics
    MachineProbes probes; // where the limits read the machine
};

class Daemon {
public:
    // Takes the single-instance lock (<controlDir>/daemon.lock; error
    // "already_running" naming the other daemon's pid), loads the settings
    // and state, opens the control sockets, and resumes the joined project
    // (paused if it was). Errors also: "insecure_control_dir", "io_error".
    static Result<std::unique_ptr<Daemon>> open(DaemonOptions options);
    ~Daemon();

    // Serves until stop() (any thread, a signal handler's thread included
    // through requestStop()).
    void run();
    void stop();

    // Joins a project as the control API's "join" does; for `demo`.
    Status join(const std::string& hub, const std::string& project);
    control::Value status() const;

private:
    explicit Daemon(DaemonOptions options);
    Status initialise();
    Result<control::Value> handle(const control::Request& request);
    void poll();
    void log(const std::string& line);
    void publish(std::string_view type, const control::Value& body);

    // Handlers (control thread).
    Result<control::Value> settingsSet(const control::Value& body);
    Result<control::Value> follow(const control::Value& body);
    Result<control::Value> unfollow(const control::Value& body);
    Result<control::Value> catalog(const control::Value& body);
    Result<control::Value> pause(const control::Value& body, bool paused);
    Result<control::Value> snooze(const control::Value& body);
    Result<control::Value> metrics(const control::Value& body) const;
    Result<control::Value> machineHistory() const;
    Result<control::Value> contributions();
    Result<control::Value> logLines() const;

    // With m_mutex held.
    Status saveState();
    Result<HubLink> resolveHub(const std::string& hub);
    Status startRunner(const std::string& hubText, const HubLink& hub, const std::string& project);
    void stopRunner();
    std::string stateText(const volunteer::AgentSummary* summary, std::string& why) const;
    void refreshPaused();

    DaemonOptions m_options;
    int m_lockFd = -1;
    std::unique_ptr<zmq::context_t> m_context;
    net::CurveKeyPair m_identity;

    mutable std::mutex m_mutex;
    std::condition_variable m_wake;
    bool m_stopping = false;
    Settings m_settings;
    std::vector<std::string> m_notices; // a corrupted settings file, ...
    std::unique_ptr<HubDirectory> m_hubs;
    std::unique_ptr<DemoHub> m_demo;
    PauseGate m_gate;
    std::unique_ptr<ProjectRunner> m_runner;
    std::string m_joinedHub; // a hub link, or "demo"
    std::string m_joinedProject;
    bool m_userPaused = false;
    bool m_generating = false; // text generation holds training
    std::unique_ptr<LimitsMonitor> m_limits;
    int64_t m_snoozeUntilMs = 0;
    std::string m_lastStateText;

    // The joined project's metric history (bounded) and this machine's.
    std::deque<control::Value> m_metricRows;
    uint64_t m_nextMetricRound = 0;
    std::deque<control::Value> m_machineRows;
    mutable std::mutex m_logMutex; // guards m_logLines only: log() is called with m_mutex held too
    std::deque<std::string> m_logLines;

    std::unique_ptr<Checkpoints> m_checkpoints;
    std::unique_ptr<control::ControlServer> m_server;
    std::thread m_poller;
};

} // namespace crowdtrain::daemon
