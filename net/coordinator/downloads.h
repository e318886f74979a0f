#pragma once

// What a project serves for download, and to whom: the resource table that
// `describe` and `fetch` read (docs/protocol.md §4), and the torrents the
// swarm seeds of its larger files. Its resources:
//   "state-v<v>"        theta_v, the current state; older ones stay while
//                       someone downloads them (a joiner slower than a
//                       round), at most kMaxOldStates, each a full state;
//   "update-v<v>"       the update that made theta_v, the newest ones while
//                       together smaller than one state (a volunteer some
//                       versions behind replays them, get_update);
//   "tokenizer/<file>"  the tokenizer's files, published once;
//   "task-data/<id>", "data/<shard>/<range>"
//                       the tokens of open tasks, built on first use
//                       (data_pieces.h);
//   "checkpoint/round-<R>/<file>"
//                       the kept checkpoints' files, to those the project's
//                       checkpoint_access lets have them;
//   "torrent/<resource>" a seeded file's .torrent (project_swarm.h).
//
// publish() brings the table in line with the round state and the
// checkpoint store after a close or a new checkpoint; tick() withdraws the
// older states nobody fetches any more, and deletes their theta files.
// The state served is the store's theta file itself (state_store.h), never
// a copy in memory or on disk.
//
// Used from the coordinator's loop thread only (as ProjectRuntime is), but
// for prepareVersion() and prepareCheckpoint(): a round close's worker
// hashes there what publish() will then find done.

#include "core/result.h"
#include "engine/data_set.h"
#include "net/coordinator/checkpoint_store.h"
#include "net/coordinator/data_pieces.h"
#include "net/coordinator/project_queries.h"
#include "net/coordinator/project_spec.h"
#include "net/coordinator/project_swarm.h"
#include "net/coordinator/round_state.h"
#include "net/coordinator/state_store.h"
#include "net/coordinator/task_board.h"
#include "net/transfer/resource_table.h"
#include "net/wire/messages.h"

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace crowdtrain::coordinator {

// "state-v<version>"
std::string stateResourceName(int64_t version);

class Downloads {
public:
    struct Parts {
        const ProjectSpec& spec;
        ProjectStore& store;
        CheckpointStore& checkpoints;
        const ProjectQueries& queries;
        const RoundState& round;
        TaskBoard& tasks;
        const engine::DataSet& data;
        swarm::SwarmSession* swarm; // null: no swarm, downloads are chunked only
        int64_t parameters = 0; // theta's elements
        // The longest a volunteer waits for one chunk (2 x heartbeat x
        // liveness): an older state's grace is at least this.
        int64_t chunkTimeoutMs = 0;
    };
    explicit Downloads(const Parts& parts);

    const net::ResourceTable& resources() const { return m_resources; }
    // The tokenizer's files, so a volunteer needs nothing but the hub's
    // address (once, when the project opens).
    Status publishTokenizer();
    const std::vector<net::FileInfo>& tokenizerFiles() const { return m_tokenizerFiles; }
    // The current state, the newest updates and the kept checkpoints'
    // files, seeded where the swarm is on; what is no longer kept is
    // withdrawn. After a version or a checkpoint.
    Status publish();
    // The swarm's periodic work and the older states' retirement.
    void tick(int64_t nowMs);
    // From a worker thread: hashes theta_version's file and the update that
    // made it into the table, and theta's torrent (when seeded), before
    // publish() serves them.
    Status prepareVersion(int64_t version, std::string update);
    // A close that prepared `version` was not committed: its resources go.
    void forgetVersion(int64_t version);
    // From a worker thread: the same for a checkpoint's files.
    Status prepareCheckpoint(const CheckpointInfo& checkpoint);

    // Before `key` describes or fetches resource `name`: a task's data or a
    // data piece is read into the table on first use; a checkpoint file is
    // refused when the project's checkpoint_access refuses the key. Other
    // names are left to the table. Errors: "forbidden", "not_found" (a
    // piece outside the train shards, a task that is not the key's).
    Status prepare(const std::string& key, const std::string& name);
    // A volunteer fetched a chunk of `name` (or of its .torrent), or asked
    // for the peers of its torrent: an older state stays served while
    // someone downloads it.
    void noteDownload(const std::string& name, int64_t nowMs);
    // Whether `key` may download checkpoints. Errors: "forbidden".
    Status checkpointAccess(const std::string& key);

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
    std::optional<net::TorrentRef> torrentOf(const std::string& resource) const { return m_swarm.torrentOf(resource); }
    // A checkpoint as the PUB socket announces it: with its torrents only
    // when everyone may download it (events reach every subscriber).
    net::CheckpointInfo announced(net::CheckpointInfo checkpoint) const;

private:
    // theta_v's file in the state folder, seeded.
    Status seedState();
    void retireOldStates(int64_t nowMs);
    net::CheckpointInfo withTorrents(net::CheckpointInfo checkpoint) const;

    const Parts m_parts;
    const uint64_t m_stateBytes;

    net::ResourceTable m_resources;
    DataPieces m_pieces; // builds the data resources into m_resources
    ProjectSwarm m_swarm; // the larger files' torrents, in m_resources too
    std::vector<net::FileInfo> m_tokenizerFiles;

    struct KeptUpdate {
        int64_t version = 0; // the update makes theta_version
        std::string stateSha256; // of theta_version
        uint64_t bytes = 0;
    };
    std::deque<KeptUpdate> m_keptUpdates; // oldest first
    static constexpr std::size_t kMaxKeptUpdates = 256;
    // Older states still served (in chunks, and seeded when the swarm is
    // on), by version: when a volunteer last asked for each. One not asked
    // for in the grace (kOldStateGraceMs, or a chunk's timeout when longer)
    // goes, and at most kMaxOldStates stay.
    std::map<int64_t, int64_t> m_oldStates;
    std::map<int64_t, int64_t> m_stateAskedMs;
    std::optional<int64_t> m_publishedState;
    static constexpr int64_t kOldStateGraceMs = 30000;
    static constexpr std::size_t kMaxOldStates = 2;
    int64_t m_swarmTickMs = 0;
    static constexpr int64_t kSwarmTickPeriodMs = 2000;
};

} // namespace crowdtrain::coordinator
