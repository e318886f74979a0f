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
// thread (run(): reads every request, answers the quick ones from memory
// at once: status, settings_get, metrics, machine_history, log, catalog
// without refresh), two work queues (work_queue.h) for the rest: "changes"
// runs the requests that change something (join, leave, pause, settings,
// downloads, ...) in the order they came, "reads" the hub reads (catalog
// refresh, contributions, checkpoints); the poller (status events every
// pollMs) and its background queue (every hubRefreshMs: the catalog,
// metrics, new checkpoints, auto-downloads, so a silent hub never holds the
// events up), the runner's agent thread, and the checkpoint worker. m_mutex guards the daemon's state and is never held
// across a hub call, a child process or the stop of an agent, so status
// answers in milliseconds whatever else is going on. Every wait wakes on
// stop().
//
// Every request field is checked on the control thread before any work
// (request_fields.h): names by the wire's rule, types exactly.

#include "engine/result.h"
#include "net/control/control_names.h"
#include "net/control/control_server.h"
#include "net/daemon/checkpoints.h"
#include "net/daemon/demo_hub.h"
#include "net/daemon/hub_directory.h"
#include "net/daemon/limits_monitor.h"
#include "net/daemon/project_runner.h"
#include "net/daemon/settings.h"
#include "net/daemon/work_queue.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
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
    // through requestStop()). An error when the control sockets fail: the
    // daemon can no longer be reached and should exit non-zero.
    Status run();
    void stop();

    // Joins a project as the control API's "join" does (queued behind the
    // requests that change things, and waited for); for `demo`.
    Status join(const std::string& hub, const std::string& project);
    control::Value status() const;

private:
    explicit Daemon(DaemonOptions options);
    Status initialise();
    void loadState();
    // Checks the request's fields, then answers at once or queues the work.
    void handle(const control::Request& request, control::Responder respond);
    // Runs `work` on `queue` and answers with its result ("busy" when full).
    void later(WorkQueue& queue, control::Responder respond, std::function<Result<control::Value>()> work);
    void poll();
    // The poller's hub work (every hubRefreshMs, on m_background): the
    // catalog, the joined project's metrics, new checkpoints, auto-downloads.
    void refreshHubs();
    void log(const std::string& line);
    void notice(const std::string& line);
    void publish(std::string_view type, const control::Value& body);

    // Request handlers (daemon_requests.cpp). The fields are checked
    // already; these run on the work queues unless said otherwise.
    Result<control::Value> settingsSet(const std::string& key, const control::Value& value);
    Result<control::Value> follow(const HubLink& hub);
    Result<control::Value> unfollow(const HubLink& hub);
    Result<control::Value> leave();
    Result<control::Value> pause(bool paused);
    Result<control::Value> snooze(int64_t seconds);
    struct CheckpointRequest {
        std::string type;
        std::optional<std::string> project; // absent: the joined one
        uint64_t round = 0;
        GenerateRequest generate;
    };
    Result<control::Value> checkpointRequest(const CheckpointRequest& request);
    // Read-only (daemon_queries.cpp); the ones marked "quick" run on the control thread.
    Result<control::Value> catalog(bool refresh); // quick without refresh
    Result<control::Value> metrics(uint64_t sinceRound) const; // quick
    Result<control::Value> machineHistory() const; // quick
    Result<control::Value> contributions();
    Result<control::Value> logLines() const; // quick

    // On the "changes" queue (or before run()); never with m_mutex held.
    Status joinNow(const std::string& hub, const std::string& project);
    void resumeJoined();
    // The hub named "demo" or by a link; starts the demo hub when needed
    // (up to two minutes).
    Result<HubLink> resolveHub(const std::string& hub);
    // The same without starting anything: for the checkpoint downloads.
    Result<HubLink> currentHub(const std::string& hub) const;

    // daemon.json in two halves, so that no file is written with m_mutex
    // held: the numbered text (with m_mutex held), then the write (without;
    // a write older than the last one written is skipped).
    struct StateSnapshot {
        uint64_t seq = 0;
        std::string text;
    };
    StateSnapshot stateSnapshot();
    Status writeState(const StateSnapshot& snapshot);

    // With m_mutex held.
    Status startRunner(const std::string& hubText, const HubLink& hub, const std::string& project);
    control::DaemonState stateOf(const volunteer::AgentSummary* summary, std::string& why) const;
    void refreshPaused();

    DaemonOptions m_options;
    int m_lockFd = -1;
    std::unique_ptr<zmq::context_t> m_context;
    net::CurveKeyPair m_identity;

    mutable std::mutex m_mutex;
    std::condition_variable m_wake;
    bool m_stopping = false;
    Settings m_settings;
    mutable std::mutex m_noticeMutex; // guards m_notices only (taken after m_mutex, never before)
    std::deque<std::string> m_notices; // a corrupted settings file, ... (bounded)
    std::unique_ptr<HubDirectory> m_hubs;
    std::mutex m_demoMutex; // guards m_demo: held while the demo hub starts, never with m_mutex
    std::unique_ptr<DemoHub> m_demo;
    mutable std::mutex m_demoLinkMutex; // guards m_demoLink only
    std::optional<HubLink> m_demoLink; // the running demo hub's link
    PauseGate m_gate;
    std::unique_ptr<ProjectRunner> m_runner;
    std::string m_joinedHub; // a hub link, or "demo"
    std::string m_joinedProject;
    bool m_userPaused = false;
    bool m_generating = false; // text generation holds training
    std::unique_ptr<LimitsMonitor> m_limits;
    int64_t m_snoozeUntilMs = 0;
    std::string m_lastStateText;
    uint64_t m_stateSeq = 0; // the last StateSnapshot's number
    std::mutex m_stateFileMutex; // guards m_writtenSeq and the writes of daemon.json
    uint64_t m_writtenSeq = 0;

    // The joined project's metric history (bounded) and this machine's.
    std::deque<control::Value> m_metricRows;
    uint64_t m_nextMetricRound = 0;
    std::deque<control::Value> m_machineRows;
    mutable std::mutex m_logMutex; // guards m_logLines only: log() is called with m_mutex held too
    std::deque<std::string> m_logLines;

    std::unique_ptr<Checkpoints> m_checkpoints;
    std::unique_ptr<control::ControlServer> m_server;
    std::unique_ptr<WorkQueue> m_changes;
    std::unique_ptr<WorkQueue> m_reads;
    std::unique_ptr<WorkQueue> m_background; // the poller's hub refresh
    std::atomic<bool> m_refreshing{false}; // one is queued or running
    std::thread m_poller;
};

} // namespace crowdtrain::daemon
