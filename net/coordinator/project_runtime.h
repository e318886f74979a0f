#pragma once

// One hosted project at run time: the global weights theta_v, the open round
// (tasks, uploads, the streaming aggregate of accepted pseudo-gradients), the
// volunteers' liveness, and the stores that make it durable. It speaks the
// wire messages (net/wire/messages.h) but owns no socket: the
// CoordinatorServer decodes a request, calls the handler here with the
// sender's authenticated Curve key, and sends what it returns. Every handler
// validates before it changes anything; an error leaves the project as it was.
//
// Durability: a round's commit (ProjectStore::commit) is atomic. Between
// commits, an accepted submission is made durable before it is acknowledged
// (payload + record under STATE/pending/, fsynced), and replayed into the
// open round when the server restarts, so nothing accepted is ever lost.
//
// Used from one thread (the server's loop).

#include "engine/data_set.h"
#include "engine/diloco/aggregator.h"
#include "engine/diloco/codec.h"
#include "engine/diloco/flat_params.h"
#include "engine/diloco/outer_optimizer.h"
#include "engine/gpt.h"
#include "net/coordinator/checkpoint_store.h"
#include "net/coordinator/data_plan.h"
#include "net/coordinator/project_spec.h"
#include "net/coordinator/state_store.h"
#include "net/transfer/resource_table.h"
#include "net/transfer/sha256.h"
#include "net/wire/messages.h"

#include <future>
#include <map>
#include <memory>
#include <optional>

namespace crowdtrain::coordinator {

struct RuntimeOptions {
    uint64_t heartbeatIntervalMs = 5000;
    uint64_t heartbeatLiveness = 3;
    uint64_t retryAfterMs = 50; // told to volunteers that find no task
    uint64_t eventsPort = 0; // the PUB socket's TCP port, told to joiners (0: unknown)
};

// What a round close or a checkpoint tells the PUB socket.
struct PublishedEvents {
    std::vector<net::EventFrames> frames;
};

class ProjectRuntime {
public:
    static Result<std::unique_ptr<ProjectRuntime>> open(
        ProjectSpec spec, const std::filesystem::path& stateDir, RuntimeOptions options, int64_t nowMs);
    ~ProjectRuntime();

    const std::string& name() const { return m_spec.name; }
    net::ProjectInfo info() const;
    int64_t version() const { return m_version; }
    const net::ResourceTable& resources() const { return m_resources; }
    void setEventsPort(uint64_t port) { m_options.eventsPort = port; }

    // Any request from `key` shows it is alive.
    void touch(const std::string& key, int64_t nowMs);

    Result<net::JoinReply> join(const std::string& key, const net::JoinRequest& request, int64_t nowMs);
    Result<net::HeartbeatReply> heartbeat(const std::string& key, const net::HeartbeatRequest& request);
    Result<net::LeaveReply> leave(const std::string& key, const net::LeaveRequest& request);
    Result<net::GetTaskReply> getTask(const std::string& key, const net::GetTaskRequest& request, int64_t nowMs);
    Result<net::UploadChunkReply> uploadChunk(const std::string& key, const net::UploadChunkRequest& request);
    Result<net::SubmitReply> submit(const std::string& key, const net::SubmitRequest& request, int64_t nowMs);
    Result<net::GetUpdateReply> getUpdate(const net::GetUpdateRequest& request) const;
    Result<net::ListCheckpointsReply> listCheckpoints() const;
    Result<net::MetricsReply> metrics(const net::MetricsRequest& request);
    Result<net::LeaderboardReply> leaderboard(const net::LeaderboardRequest& request);
    Result<net::MyStatsReply> myStats(const std::string& key);

    // Dead volunteers, expired tasks, the round's wrap-up signal and its
    // close when they are due.
    PublishedEvents tick(int64_t nowMs);
    // Whether tick() has a round to close or wrap up now (the server then
    // ticks at once instead of at its next period).
    bool tickDue() const { return roundDue() || (m_wrappingUp && !m_wrapUpAnnounced); }

    uint64_t volunteersOnline() const;
    int64_t acceptedThisRound() const { return int64_t(m_accepted.size()); }

private:
    struct Volunteer {
        std::string displayName;
        std::string session;
        int64_t lastSeenMs = 0;
        bool online = false;
    };
    // A task handed out in the open round, and its upload.
    // The checks that read the payload (SHA-256, finiteness, norm) run on
    // each chunk as it arrives, so that submit does not read it again.
    struct UploadChecks {
        UploadChecks(diloco::Codec codec, int64_t n)
            : inspector(codec, n)
        { }
        net::Sha256 sha;
        diloco::StreamInspector inspector;
        Status inspected; // the first error the inspector reported
    };
    struct TaskState {
        Lease lease;
        uint64_t tokens = 0; // the task's training tokens (H * B * T)
        uint64_t receivedBytes = 0;
        uint64_t nextChunk = 0;
        std::filesystem::path uploadFile;
        std::shared_ptr<UploadChecks> checks; // of the chunks received so far
    };
    struct Accepted {
        ContributionRecord record;
        uint32_t range = 0;
        double norm = 0;
    };

    ProjectRuntime(ProjectSpec spec, RuntimeOptions options);
    Status initialise(const std::filesystem::path& stateDir, int64_t nowMs);
    Status createVersionZero(int64_t nowMs);
    Status publishResources();
    Status replayPending();

    // Makes the next lease id durably unused before it is handed out.
    Status reserveLeaseId();
    Result<Volunteer*> sessionOf(const std::string& key, const std::string& session);
    uint64_t outstandingTokens() const;
    // Accepted plus outstanding tokens reach the round's target: no new task.
    bool workHandedOut() const;
    void dropTask(uint64_t taskId, bool returnRange);
    Status reject(const std::string& key, const TaskState& task, const net::SubmitRequest& request, const Error& why,
        int64_t nowMs);
    Status acceptDurably(
        const std::string& key, const TaskState& task, const net::SubmitRequest& request, double norm, int64_t nowMs);
    Status accumulateFile(const std::filesystem::path& payload, double weight);

    bool roundDue() const;
    void wrapUpIfIdle(const std::string& key);
    Result<PublishedEvents> closeRound(int64_t nowMs);
    std::string serviceBytes() const; // GlobalState::extra of the state this round commits
    Status restoreServiceBytes(const std::string& bytes);
    // Runs on the evaluation thread: uses m_model, which nothing else touches
    // once the project is open.
    std::optional<double> evaluate(const std::vector<float>& params);
    // Records a finished evaluation (ledger, event, checkpoint); with `wait`,
    // waits for a running one first.
    void finishEvaluation(bool wait, PublishedEvents& events);
    std::filesystem::path pendingDir() const;

    // project_tasks.cpp: open tasks on disk, for a restart.
    std::filesystem::path tasksDir() const;
    Status recordOpenTask(const TaskState& task);
    void forgetOpenTask(uint64_t taskId);
    Status restoreOpenTasks();
    Status resumeUpload(TaskState& task);
    uint64_t taskTokens() const; // H * B * T
    std::filesystem::path uploadsDir() const;

    ProjectSpec m_spec;
    RuntimeOptions m_options;
    diloco::Codec m_codec = diloco::Codec::Int8;
    std::optional<engine::DataSet> m_data;
    std::optional<ProjectStore> m_store;
    std::optional<CheckpointStore> m_checkpoints;
    std::optional<DataPlan> m_plan;
    engine::Gpt m_model{nullptr}; // evaluation and manifest
    diloco::Manifest m_manifest;
    std::vector<net::TensorSpec> m_wireManifest;
    std::string m_manifestSha;
    int64_t m_parameters = 0;

    int64_t m_version = 0;
    std::vector<float> m_params;
    std::string m_paramsSha;
    std::unique_ptr<diloco::OuterNesterov> m_outer;
    std::vector<float> m_residual;
    std::optional<double> m_lastValLoss;
    int64_t m_totalTokens = 0;

    std::unique_ptr<diloco::RoundAggregator> m_aggregator;
    diloco::NormGate m_normGate;
    std::vector<Accepted> m_accepted;
    int64_t m_acceptedTokens = 0;
    bool m_wrappingUp = false; // the open round asks its task holders to submit now
    bool m_wrapUpAnnounced = false; // round_wrap_up was published

    struct PendingEvaluation {
        int64_t round = 0;
        int64_t tokens = 0;
        std::shared_ptr<const std::vector<float>> params;
        net::RoundClosedEvent event;
        std::future<std::optional<double>> loss;
    };
    std::optional<PendingEvaluation> m_evaluation;
    int64_t m_lastTickMs = 0;

    std::map<std::string, Volunteer> m_volunteers;
    std::map<uint64_t, TaskState> m_tasks; // by task id (= lease id)
    // Lease ids below this are (or may have been) handed out; it is stored in
    // the ledger's meta table a block ahead, so a restart never reuses an id.
    uint64_t m_leaseIdCeiling = 0;
    net::ResourceTable m_resources;
};

} // namespace crowdtrain::coordinator
