#pragma once

// One hosted project at run time, the facade over its collaborators. It
// speaks the wire messages (net/wire/messages.h) but owns no socket: the
// CoordinatorServer decodes a request, calls the handler here with the
// sender's authenticated Curve key, and sends what it returns. Every handler
// validates before it changes anything; an error leaves the project as it was.
//
// The collaborators, each with its own header:
//   Sessions        who is online (join, leave, liveness)           sessions.h
//   TaskBoard       task leasing and open tasks on disk             task_board.h
//   Submissions     uploads, checks, the gate, durable acceptance   submissions.h
//   RoundState      theta_v, the aggregate, outer step, commit      round_state.h
//   Evaluation      validation loss on its own thread               evaluation.h
//   RoundPolicy     what is handed out, wrap-ups, when a round is due round_policy.h
//   Downloads       states, updates, data, checkpoints, torrents     downloads.h
//   ProjectQueries  checkpoints, metrics, leaderboard, my_stats     project_queries.h
// What stays here is the requests' order across them (a session is checked
// before the rest; a close frees the round's policy, publishes the version
// and starts its evaluation) and the events for the PUB socket.
//
// A round close never runs on the loop (docs/architecture.md, "The round
// close"): tick() starts it on the project's worker thread (aggregate, outer step, the
// next version's files written and hashed, its torrent made), collects it
// at a later tick (the ledger's commit, the switch to the new version,
// version_published), and the evaluation thread then evaluates, exports
// the checkpoint when one is due and hashes it; a later tick records that
// and reports the round (RuntimeOptions::roundReport). Meanwhile the loop
// answers every request from the version it serves.
//
// Durability: a round's commit (ProjectStore::commit) is atomic. Between
// commits, an accepted submission is made durable (on the same worker, so
// never during a close) before it is acknowledged and replayed into the
// open round when the server restarts, and open tasks are recorded before
// they are handed out, so nothing accepted is ever lost. A close begins
// only when no acceptance is on the worker.
//
// Used from one thread (the server's loop); the close and the evaluation
// run on their own.

#include "engine/data_set.h"
#include "engine/diloco/flat_params.h"
#include "net/coordinator/checkpoint_store.h"
#include "net/coordinator/close_retry.h"
#include "net/coordinator/data_plan.h"
#include "net/coordinator/downloads.h"
#include "net/coordinator/evaluation.h"
#include "net/coordinator/project_queries.h"
#include "net/coordinator/project_spec.h"
#include "net/coordinator/round_policy.h"
#include "net/coordinator/round_state.h"
#include "net/coordinator/runtime_options.h"
#include "net/coordinator/sessions.h"
#include "net/coordinator/state_store.h"
#include "net/coordinator/submissions.h"
#include "net/coordinator/task_board.h"
#include "net/transport/pirate.h"
#include "net/wire/messages.h"

#include <functional>
#include <future>
#include <memory>
#include <optional>

namespace crowdtrain::coordinator {

class ProjectRuntime {
public:
    static Result<std::unique_ptr<ProjectRuntime>> open(
        ProjectSpec spec, const std::filesystem::path& stateDir, RuntimeOptions options, int64_t nowMs);
    ~ProjectRuntime();

    const std::string& name() const { return m_spec.name; }
    std::string unprotected() const { return m_spec.unprotected(); }
    net::ProjectInfo info() const;
    int64_t version() const { return m_round->version(); }
    void setEventsPort(uint64_t port) { m_options.eventsPort = port; }
    // What it serves for download (describe, fetch, get_update,
    // list_checkpoints, swarm_peers) and its read-only queries (metrics,
    // leaderboard).
    Downloads& downloads() { return *m_downloads; }
    ProjectQueries& queries() { return *m_queries; }

    // Any request from `key` shows it is alive.
    void touch(const std::string& key, int64_t nowMs) { m_sessions->touch(key, nowMs); }

    Result<net::JoinReply> join(const std::string& key, const net::JoinRequest& request, int64_t nowMs);
    Result<net::HeartbeatReply> heartbeat(const std::string& key, const net::HeartbeatRequest& request);
    Result<net::LeaveReply> leave(const std::string& key, const net::LeaveRequest& request);
    // `done` hears the reply on the loop: at once, or once the task's record
    // is durable (a later tick). A task's version may have moved on by then:
    // stale_version, as if asked after the close.
    using GetTaskDone = std::function<void(Result<net::GetTaskReply>)>;
    void getTask(const std::string& key, const net::GetTaskRequest& request, int64_t nowMs, GetTaskDone done);
    // Waits for the records being written and answers their get_tasks.
    void finishRecords(int64_t nowMs) { collectRecords(true, nowMs); }
    Result<net::UploadChunkReply> uploadChunk(
        const std::string& key, const net::UploadChunkRequest& request, int64_t nowMs);
    // `done` hears the verdict on the loop: at once, or when the acceptance
    // is durable (a later tick), or, for a submit that comes while the round
    // is being closed, once the close ended (its round then closed without
    // it: stale_version; or the close failed and the round is open).
    void submit(const std::string& key, const net::SubmitRequest& request, int64_t nowMs, Submissions::SubmitDone done);
    // Waits for the acceptances on the worker and answers them.
    void finishAccepting() { m_submissions->collectAccepted(true); }
    Result<net::MyStatsReply> myStats(const std::string& key)
    {
        return m_queries->myStats(key, m_round->totalTokens());
    }

    // Dead volunteers, expired tasks, the round's wrap-up signal and its
    // close when they are due.
    PublishedEvents tick(int64_t nowMs);
    // Whether tick() has a round to close or wrap up now (the server then
    // ticks at once instead of at its next period); not while a close runs.
    // A failed close waits for its retry (close_retry.h).
    bool tickDue() const;
    // Whether a round's close is in progress on the worker or the evaluation thread.
    bool closing() const { return m_closing.has_value() || m_evaluation->running(); }
    // Whether the worker holds an acceptance, or the task board a record,
    // whose requester waits for the reply (the server then ticks at a
    // shorter period; a close is collected at the usual one).
    bool working() const { return m_submissions->accepting() || !m_recordingTasks.empty(); }

private:
    ProjectRuntime(ProjectSpec spec, RuntimeOptions options);
    Status initialise(const std::filesystem::path& stateDir, int64_t nowMs);
    // Whether a round's close may begin now: due, none running, and past
    // the wait after a failed one.
    bool closeDue() const;
    // Starts the close on the worker thread.
    void beginClose(int64_t nowMs);
    // Publishes a finished close (with `wait`: waits for it).
    void collectClose(bool wait, PublishedEvents& events);
    // At a start: the last round's evaluation and checkpoint, when a crash lost them.
    void resumeEvaluation();
    // The evaluation thread's work after a close: the checkpoint.
    void exportCheckpoint(Evaluation::Done& done);
    // Records a finished evaluation (ledger, event, checkpoint, the round's
    // report); with `wait`, waits for a running one first.
    void finishEvaluation(bool wait, PublishedEvents& events);
    // Answers the get_tasks whose records are written (with `wait`: all).
    void collectRecords(bool wait, int64_t nowMs);
    // The reply handing out `task`.
    net::Task wireTask(const OpenTask& task, int64_t nowMs) const;
    // Files released between closes (an old state withdrawn) are unlinked
    // on a thread of their own: GB-sized files take a while.
    void removeReleasedFiles();

    ProjectSpec m_spec;
    RuntimeOptions m_options;
    std::optional<diloco::SparseLayout> m_sparseLayout; // with the sparse codec
    std::optional<engine::DataSet> m_data;
    std::optional<ProjectStore> m_store;
    std::optional<CheckpointStore> m_checkpoints;
    std::optional<DataPlan> m_plan;
    std::vector<net::TensorSpec> m_wireManifest;
    std::string m_manifestSha;
    std::optional<net::SeedInit> m_seedInit; // when theta_0 came from the spec's seed
    int64_t m_parameters = 0;

    std::unique_ptr<Sessions> m_sessions;
    std::unique_ptr<RoundState> m_round;
    std::unique_ptr<TaskBoard> m_tasks;
    std::unique_ptr<RoundPolicy> m_policy;
    std::unique_ptr<Submissions> m_submissions;
    std::unique_ptr<Evaluation> m_evaluation;
    std::unique_ptr<ProjectQueries> m_queries;
    std::unique_ptr<Downloads> m_downloads;

    // The close in progress (declared last: destroyed, so joined, first).
    struct Report {
        RoundReport report;
        int64_t startedMs = 0; // steady clock
    };
    std::optional<Report> m_report; // of the close or evaluation in progress
    CloseRetry m_closeRetry; // after a failed close
    std::optional<std::future<Result<RoundState::Closed>>> m_closing;
    std::future<void> m_removing; // removeReleasedFiles()
    // Submits that came while the round was being closed, answered after.
    struct WaitingSubmit {
        std::string key;
        net::SubmitRequest request;
        int64_t nowMs = 0;
        Submissions::SubmitDone done;
    };
    std::vector<WaitingSubmit> m_waitingSubmits;
    // get_tasks waiting for their task's record.
    struct RecordingTask {
        uint64_t taskId = 0;
        std::string key;
        uint64_t version = 0; // the requester's
        GetTaskDone done;
    };
    std::vector<RecordingTask> m_recordingTasks;
    // The close and the acceptances run on it (last: destroyed, so joined,
    // first, after finishing what was posted).
    std::unique_ptr<ProjectWorker> m_worker = std::make_unique<ProjectWorker>("project-work");
};

} // namespace crowdtrain::coordinator
