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
// thread (run(): reads every request and answers the quick ones from memory
// at once), the request table's two queues ("changes" runs what changes
// something in the order it came, "reads" the hub reads), the poller and
// its background queue, the runner's agent thread, and the checkpoint
// worker. No lock is held across a hub call, a child process or the stop of
// an agent, and status reads what each part published (the limits' last
// evaluation, the swarm's last view), never a lock held across NVML, /proc,
// a file's fsync or libtorrent, so it answers in milliseconds whatever else
// is going on.
//
// Its collaborators, one role each:
//   RequestTable    request type -> handler (daemon_requests.h)  request_table.h
//   JoinedProject   the joined project's lifecycle, daemon.json  joined_project.h
//   HubResolver     "demo" or a link -> a hub to call             hub_resolver.h
//   HistoryCache    metric rows and this machine's history        history_cache.h
//   LogRing         the log lines and the status's notices        log_ring.h
//   Poller          status events, limits, hub refresh            poller.h
//   status_words.h  the status map and its state in plain words

#include "core/file_io.h"
#include "core/result.h"
#include "net/control/control_server.h"
#include "net/daemon/checkpoints.h"
#include "net/daemon/history_cache.h"
#include "net/daemon/hub_resolver.h"
#include "net/daemon/joined_project.h"
#include "net/daemon/limits_monitor.h"
#include "net/daemon/live_settings.h"
#include "net/daemon/log_ring.h"
#include "net/daemon/poller.h"
#include "net/daemon/request_table.h"

#include <atomic>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>

namespace crowdtrain::daemon {

struct DaemonOptions {
    std::filesystem::path dataDir; // identity, state, caches, checkpoints
    std::filesystem::path configDir; // settings.json
    std::filesystem::path controlDir; // the control API's sockets
    std::filesystem::path serverBinary; // crowdtrain-server, for the demo hub
    std::filesystem::path prepareBinary; // crowdtrain-prepare, for the demo hub's corpus
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
    Status lock();
    Status initialise();
    void publish(std::string_view type, const control::Value& body);
    // The poller's next beat now (Poller::beatNow): after a change request
    // and when a generation starts or ends. Any thread, until destruction.
    void beatNow();

    DaemonOptions m_options;
    std::optional<core::FolderLock> m_lock; // released last, after everything it guards
    std::unique_ptr<zmq::context_t> m_context;
    net::CurveKeyPair m_identity;

    std::unique_ptr<control::ControlServer> m_server;
    LogRing m_log;
    std::unique_ptr<LiveSettings> m_settings;
    std::unique_ptr<HubDirectory> m_hubs;
    std::unique_ptr<HubResolver> m_resolver;
    std::unique_ptr<LimitsMonitor> m_limits;
    HistoryCache m_history;
    std::unique_ptr<JoinedProject> m_joined;
    std::unique_ptr<CheckpointSwarm> m_swarm; // used by m_checkpoints
    std::unique_ptr<Checkpoints> m_checkpoints;
    std::unique_ptr<RequestTable> m_requests;
    mutable std::mutex m_pollerMutex; // m_poller's pointer, for beatNow() from other threads
    std::unique_ptr<Poller> m_poller;
    std::atomic<bool> m_stopLogged{false}; // stop()'s first call logs its parts
};

} // namespace crowdtrain::daemon
