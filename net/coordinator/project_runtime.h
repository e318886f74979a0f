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
//   ProjectQueries  checkpoints, metrics, leaderboard, my_stats     project_queries.h
// What stays here is the round's policy across them: what may be handed
// out, when a round wraps up (and around whom), when it closes, and what is
// published (resources for download, events for the PUB socket).
//
// Durability: a round's commit (ProjectStore::commit) is atomic. Between
// commits, an accepted submission is made durable before it is acknowledged
// and replayed into the open round when the server restarts, and open tasks
// are recorded before they are handed out, so nothing accepted is ever lost.
//
// Used from one thread (the server's loop); the evaluation runs on its own.

#include "engine/data_set.h"
#include "engine/diloco/flat_params.h"
#include "net/coordinator/checkpoint_store.h"
#include "net/coordinator/data_pieces.h"
#include "net/coordinator/data_plan.h"
#include "net/coordinator/evaluation.h"
#include "net/coordinator/project_queries.h"
#include "net/coordinator/project_spec.h"
#include "net/coordinator/project_swarm.h"
#include "net/coordinator/round_state.h"
#include "net/coordinator/sessions.h"
#include "net/coordinator/state_store.h"
#include "net/coordinator/submissions.h"
#include "net/coordinator/task_board.h"
#include "net/transfer/resource_table.h"
#include "net/transport/pirate.h"
#include "net/wire/messages.h"

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>

namespace crowdtrain::coordinator {

struct RuntimeOptions {
    uint64_t heartbeatIntervalMs = net::kHeartbeatIntervalMs;
    uint64_t heartbeatLiveness = net::kHeartbeatLiveness;
    uint64_t retryAfterMs = 50; // told to volunteers that find no task
    uint64_t eventsPort = 0; // the PUB socket's TCP port, told to joiners (0: unknown)
    // The coordinator's BitTorrent session, seeding published checkpoints
    // (project_swarm.h); null: no swarm, downloads are chunked only.
    swarm::SwarmSession* swarm = nullptr;
    // Fault injection for tests: called with "tick" as each tick starts and
    // with "evaluate" on the evaluation thread before a closed round is
    // evaluated (`round`: the open or the evaluated round); what it throws
    // is that step's failure.
    std::function<void(std::string_view where, int64_t round)> faultPoint;
};

// Wall-clock time, Unix epoch milliseconds: what the coordinator records.
int64_t unixTimeMs();

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
    int64_t version() const { return m_round->version(); }
    const net::ResourceTable& resources() const { return m_resources; }
    // Before `key` describes or fetches resource `name`: a task's data
    // ("task-data/<id>", of an open task of `key`) or a data piece
    // ("data/<shard>/<begin>-<end>") is read into the table on first use
    // (data_pieces.h); a checkpoint file is refused when the project's
    // checkpoint_access refuses the key. Other names are left to the table.
    // Errors: "forbidden", "not_found" (a piece outside the train shards,
    // a task that is not the key's).
    Status prepareResource(const std::string& key, const std::string& name);
    // A volunteer fetched a chunk of `name` (or of its .torrent), or asked
    // for the peers of its torrent: an older state stays served while
    // someone downloads it.
    void noteDownload(const std::string& name, int64_t nowMs);
    // Whether `key` may download checkpoints. Errors: "forbidden".
    Status checkpointAccess(const std::string& key);
    void setEventsPort(uint64_t port) { m_options.eventsPort = port; }

    // Any request from `key` shows it is alive.
    void touch(const std::string& key, int64_t nowMs) { m_sessions->touch(key, nowMs); }

    Result<net::JoinReply> join(const std::string& key, const net::JoinRequest& request, int64_t nowMs);
    Result<net::HeartbeatReply> heartbeat(const std::string& key, const net::HeartbeatRequest& request);
    Result<net::LeaveReply> leave(const std::string& key, const net::LeaveRequest& request);
    Result<net::GetTaskReply> getTask(const std::string& key, const net::GetTaskRequest& request, int64_t nowMs);
    Result<net::UploadChunkReply> uploadChunk(
        const std::string& key, const net::UploadChunkRequest& request, int64_t nowMs);
    Result<net::SubmitReply> submit(const std::string& key, const net::SubmitRequest& request, int64_t nowMs);
    Result<net::GetUpdateReply> getUpdate(const net::GetUpdateRequest& request) const;
    // The kept checkpoints, with their files' torrents where seeded and
    // `key` may download them (everyone may, or the key by the project's
    // checkpoint_access; no key: the public).
    Result<net::ListCheckpointsReply> listCheckpoints(const std::optional<std::string>& key = std::nullopt);
    // Who holds a torrent of this project (`address`: the asker's IP as
    // the socket saw it). Errors: "not_found", "forbidden" (as for the
    // torrent's file).
    Result<net::SwarmPeersReply> swarmPeers(
        const std::string& key, const net::SwarmPeersRequest& request, const std::string& address, int64_t nowMs);
    Result<net::MetricsReply> metrics(const net::MetricsRequest& request) { return m_queries->metrics(request); }
    Result<net::LeaderboardReply> leaderboard(const net::LeaderboardRequest& request)
    {
        return m_queries->leaderboard(request);
    }
    Result<net::MyStatsReply> myStats(const std::string& key)
    {
        return m_queries->myStats(key, m_round->totalTokens());
    }

    // Dead volunteers, expired tasks, the round's wrap-up signal and its
    // close when they are due.
    PublishedEvents tick(int64_t nowMs);
    // Whether tick() has a round to close or wrap up now (the server then
    // ticks at once instead of at its next period).
    bool tickDue() const { return roundDue() || (m_wrapUp.active && !m_wrapUp.announced); }

    uint64_t volunteersOnline() const { return m_sessions->online(); }
    int64_t acceptedThisRound() const { return int64_t(m_round->accepted().size()); }

private:
    ProjectRuntime(ProjectSpec spec, RuntimeOptions options);
    Status initialise(const std::filesystem::path& stateDir, int64_t nowMs);
    Status publishResources();
    Status seedState();
    Status publishTokenizer();

    // Accepted plus outstanding tokens reach the round's target: no new task.
    bool workHandedOut() const;
    // Ends a task that was not accepted; unless `keepWrapUp`, a wrap-up is
    // called off when the round is left short of work.
    void endTask(uint64_t taskId, bool returnRange, bool keepWrapUp = false);
    void endTasksOf(const std::string& key);
    bool roundDue() const;
    // Another key, not itself at the cap, has an accepted submission or an
    // open task in this round (so the cap can never shut every key out).
    bool othersAreWorking(const std::string& key) const;
    void wrapUpIfIdle(const std::string& key);
    // After a wrap-up's grace, the tasks whose holders have sent nothing
    // since it began are taken back, so the round closes around them.
    void dropSilentHolders(int64_t nowMs);
    int64_t wrapUpGraceMs() const;
    Result<PublishedEvents> closeRound(int64_t nowMs);
    // Records a finished evaluation (ledger, event, checkpoint); with `wait`,
    // waits for a running one first.
    void finishEvaluation(bool wait, PublishedEvents& events);

    ProjectSpec m_spec;
    RuntimeOptions m_options;
    diloco::Codec m_codec = diloco::Codec::Int8;
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
    std::unique_ptr<Submissions> m_submissions;
    std::unique_ptr<Evaluation> m_evaluation;
    std::unique_ptr<ProjectQueries> m_queries;

    struct WrapUp {
        bool active = false; // the open round asks its task holders to submit now
        bool announced = false; // round_wrap_up was published
        int64_t atMs = 0; // when it was
        // Keys whose task was taken back because they stayed silent through
        // the wrap-up: they get no other task in this round.
        std::set<std::string> silentKeys;
    };
    WrapUp m_wrapUp;
    // Submissions of the open round rejected on their payload, by key: after
    // kMaxRejectionsPerKeyPerRound a key gets no other task until the round
    // closes, so a hostile key cannot hold the round's work (and its honest
    // volunteers' time) by failing task after task. Only while another key
    // below the cap works in the round (othersAreWorking): volunteers whose
    // honest updates the gate refused must not stall the project.
    static constexpr int kMaxRejectionsPerKeyPerRound = 3;
    std::map<std::string, int> m_rejectionsThisRound;
    net::ResourceTable m_resources;
    // The latest updates, oldest first, while their bytes together stay
    // within one full state's: a volunteer some rounds behind replays them
    // (get_update from each version in turn) when that is smaller than
    // downloading the state, and downloads the state otherwise.
    struct KeptUpdate {
        int64_t version = 0; // the update makes theta_version
        std::string stateSha256; // of theta_version
        uint64_t bytes = 0;
    };
    std::deque<KeptUpdate> m_keptUpdates;
    static constexpr std::size_t kMaxKeptUpdates = 256;
    // Older states still served (in chunks, and seeded when the swarm is
    // on), by version: when a volunteer last asked for each. A joiner on a
    // slow link may need several rounds for the state; it then replays the
    // kept updates. One not asked for in the grace (kOldStateGraceMs, or a
    // chunk's timeout when longer: retireOldStates) goes, and at most
    // kMaxOldStates stay (each is a full state in memory and on disk).
    std::map<int64_t, int64_t> m_oldStates;
    std::map<int64_t, int64_t> m_stateAskedMs;
    std::optional<int64_t> m_publishedState;
    static constexpr int64_t kOldStateGraceMs = 30000;
    static constexpr std::size_t kMaxOldStates = 2;
    void retireOldStates(int64_t nowMs);
    std::vector<net::FileInfo> m_tokenizerFiles;
    std::optional<DataPieces> m_pieces; // builds the data resources into m_resources
    std::unique_ptr<ProjectSwarm> m_swarm; // the checkpoints' torrents, in m_resources too
    int64_t m_swarmTickMs = 0;
    static constexpr int64_t kSwarmTickPeriodMs = 2000;
    net::CheckpointInfo withTorrents(net::CheckpointInfo checkpoint) const;
};

} // namespace crowdtrain::coordinator
