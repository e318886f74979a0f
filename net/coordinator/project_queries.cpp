#include "net/coordinator/project_queries.h"

#include <cstdint>

namespace crowdtrain::coordinator {
namespace {

net::ContributorRow wireContributor(const LeaderboardEntry& e)
{
    return {e.displayName, e.publicKey, uint64_t(e.tokens), uint64_t(e.accepted), uint64_t(e.rejected),
        e.computeSeconds, e.device};
}

} // namespace

std::string checkpointResourceName(int64_t round, const std::string& file)
{
    return "checkpoint/round-" + std::to_string(round) + "/" + file;
}

net::CheckpointInfo wireCheckpoint(const CheckpointInfo& c)
{
    net::CheckpointInfo wire;
    wire.round = uint64_t(c.round);
    wire.version = uint64_t(c.round);
    wire.tokens = uint64_t(c.tokens);
    wire.valLoss = c.valLoss;
    wire.createdMs = uint64_t(c.createdMs);
    for (const CheckpointFile& f : c.files)
        wire.files.push_back({f.name, f.bytes, f.sha256, checkpointResourceName(c.round, f.name), std::nullopt});
    return wire;
}

Result<net::ListCheckpointsReply> ProjectQueries::listCheckpoints() const
{
    auto list = m_checkpoints.list();
    if (!list)
        return list.error();
    net::ListCheckpointsReply reply;
    for (const CheckpointInfo& c : *list) {
        reply.checkpoints.push_back(wireCheckpoint(c));
        auto mix = deviceMix(c.round);
        if (!mix)
            return mix.error();
        reply.checkpoints.back().devices = std::move(*mix);
    }
    return reply;
}

Result<std::vector<net::DeviceShare>> ProjectQueries::deviceMix(std::optional<int64_t> round) const
{
    auto rows = m_store.ledger().deviceMix(round, int(net::kMaxDeviceShares));
    if (!rows)
        return rows.error();
    std::vector<net::DeviceShare> shares;
    for (const DeviceMixRow& row : *rows)
        shares.push_back({row.device, uint64_t(row.volunteers), uint64_t(row.tokens)});
    return shares;
}

Result<net::MetricsReply> ProjectQueries::metrics(const net::MetricsRequest& request)
{
    if (request.sinceRound > uint64_t(INT64_MAX)) // no round is numbered that high
        return net::MetricsReply{};
    auto rows = m_store.ledger().metricHistory(int64_t(request.sinceRound));
    if (!rows)
        return rows.error();
    net::MetricsReply reply;
    for (const MetricSample& m : *rows) {
        if (reply.rows.size() >= request.limit)
            break;
        reply.rows.push_back({uint64_t(m.round), uint64_t(m.tokens), m.trainLoss, m.valLoss,
            uint64_t(m.volunteersOnline), uint64_t(m.timeMs)});
    }
    return reply;
}

Result<net::LeaderboardReply> ProjectQueries::leaderboard(const net::LeaderboardRequest& request)
{
    auto rows = m_store.ledger().leaderboard(int(request.limit));
    if (!rows)
        return rows.error();
    net::LeaderboardReply reply;
    for (const LeaderboardEntry& e : *rows)
        reply.rows.push_back(wireContributor(e));
    return reply;
}

Result<net::MyStatsReply> ProjectQueries::myStats(const std::string& key, int64_t projectTokens)
{
    auto totals = m_store.ledger().volunteerTotals(key);
    if (!totals)
        return totals.error();
    auto board = m_store.ledger().leaderboard(int(net::kMaxLeaderboardRows));
    if (!board)
        return board.error();
    net::MyStatsReply reply;
    reply.stats = wireContributor(*totals);
    reply.contributors = board->size();
    for (std::size_t i = 0; i < board->size(); ++i)
        if ((*board)[i].publicKey == key)
            reply.rank = i + 1;
    reply.projectTokens = uint64_t(projectTokens);
    return reply;
}

} // namespace crowdtrain::coordinator
