#pragma once

// The read-only requests about one project: its published checkpoints, its
// metric history, its leaderboard and one volunteer's totals, all answered
// from the ledger and the checkpoint store. Nothing here changes state.
//
// Used from one thread (the server's loop).

#include "net/coordinator/checkpoint_store.h"
#include "net/coordinator/state_store.h"
#include "net/wire/messages.h"

namespace crowdtrain::coordinator {

// A published checkpoint as the wire describes it; its files are served as
// resources "checkpoint/round-<R>/<file>".
net::CheckpointInfo wireCheckpoint(const CheckpointInfo& checkpoint);
std::string checkpointResourceName(int64_t round, const std::string& file);

class ProjectQueries {
public:
    ProjectQueries(ProjectStore& store, CheckpointStore& checkpoints)
        : m_store(store)
        , m_checkpoints(checkpoints)
    { }

    Result<net::ListCheckpointsReply> listCheckpoints() const;
    // Accepted tokens by the device volunteers named: of one round, or of
    // the whole project.
    Result<std::vector<net::DeviceShare>> deviceMix(std::optional<int64_t> round = std::nullopt) const;
    Result<net::MetricsReply> metrics(const net::MetricsRequest& request);
    Result<net::LeaderboardReply> leaderboard(const net::LeaderboardRequest& request);
    Result<net::MyStatsReply> myStats(const std::string& key, int64_t projectTokens);

private:
    ProjectStore& m_store;
    CheckpointStore& m_checkpoints;
};

} // namespace crowdtrain::coordinator
