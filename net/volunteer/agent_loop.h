#pragma once

// VolunteerAgent's implementation (private to net/volunteer): one run() of
// the agent, made of collaborators with one owner each
// (docs/architecture.md, "The volunteer agent"):
//   Session     connection, join, heartbeats, reconnects, events (session.h)
//   ThetaSync   theta_v: local copy, updates, full state (theta_sync.h)
//   TaskRunner  a task's inner steps on the training thread (task_runner.h)
//   Uploader    encode, upload, submit; the pending submission (uploader.h)
//   Reporter    log lines and the published summary (reporter.h)
// AgentLoop owns them and decides what comes next: join, sync, ask for a
// task, train, submit, wait for the round. Everything runs on run()'s
// thread except the training thread, which TaskRunner starts and joins.

#include "core/file_io.h"
#include "net/volunteer/agent.h"
#include "net/volunteer/core_host.h"
#include "net/volunteer/local_store.h"
#include "net/volunteer/piece_library.h"
#include "net/volunteer/reporter.h"
#include "net/volunteer/session.h"
#include "net/volunteer/task_runner.h"
#include "net/volunteer/theta_sync.h"
#include "net/volunteer/uploader.h"

#include <chrono>
#include <functional>
#include <optional>

namespace crowdtrain::volunteer {

class AgentLoop {
public:
    AgentLoop(VolunteerAgent& agent, const AgentOptions& options);
    ~AgentLoop();
    Status run();

private:
    using Clock = std::chrono::steady_clock;

    Status prepare();
    Status checkJoin(const net::JoinReply& reply);
    Status cycle();
    Status obtainTask(std::optional<net::Task>& task);
    Status trainTask(const net::Task& task);
    // Overlap: asks for a task of the next round; keeps it in m_aheadTask.
    void obtainAheadTask();
    bool wantsAheadTask() const;
    void leaseAheadEarly();
    // A task leased ahead has trained: waits until the coordinator has
    // published its version and theta is synced to it.
    Status waitForBase(const net::Task& task);
    void syncWhileTraining();
    Status waitForWork(uint64_t retryAfterMs);
    bool limitsReached() const;
    bool stopping() const { return m_stop.load(); }
    // Sleeps in 50 ms steps until `until` or a stop, calling `eachTick` (if
    // any) at each step.
    void sleepUntil(Clock::time_point until, const std::function<void()>& eachTick = {});

    const AgentOptions& m_options;
    CoreHost& m_core;
    const std::atomic<bool>& m_stop;
    Reporter m_reporter;
    // Declared before every socket's owner: destroyed after them.
    zmq::context_t m_context;
    std::optional<ProjectFolder> m_folder;
    // Held while the agent runs: a second agent on the same project folder
    // (a `join` beside the service, say) is refused instead of both
    // overwriting theta, the residual and the downloads.
    std::optional<core::FolderLock> m_folderLock;
    std::unique_ptr<TokenLibrary> m_shards;
    std::unique_ptr<Session> m_session;
    std::unique_ptr<StateSwarm> m_stateSwarm;
    std::unique_ptr<ThetaSync> m_theta;
    std::unique_ptr<TaskRunner> m_runner;
    std::unique_ptr<Uploader> m_uploader;

    engine::GptConfig m_model;
    std::vector<net::TensorSpec> m_checkedManifest;
    std::optional<uint64_t> m_startVersion;
    std::optional<net::Task> m_aheadTask; // leased for the next round, not started
    std::shared_ptr<const Theta> m_aheadStart; // where it starts: the last task's weights
    Clock::time_point m_started;
};

} // namespace crowdtrain::volunteer
