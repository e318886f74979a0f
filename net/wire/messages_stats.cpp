#include "net/wire/messages_stats.h"

#include "net/wire/limits.h"

namespace crowdtrain::net {

void ListCheckpointsRequest::write(MapWriter& w) const
{
    w.str("project", project);
}

ListCheckpointsRequest ListCheckpointsRequest::read(MapView v)
{
    return {v.projectName("project")};
}

void ListCheckpointsReply::write(MapWriter& w) const
{
    w.array("checkpoints", arrayOf(checkpoints));
}

ListCheckpointsReply ListCheckpointsReply::read(MapView v)
{
    return {readAll<CheckpointInfo>(v, "checkpoints", kMaxCheckpoints)};
}

void MetricsRequest::write(MapWriter& w) const
{
    w.str("project", project).u64("since_round", sinceRound).u64("limit", limit);
}

MetricsRequest MetricsRequest::read(MapView v)
{
    MetricsRequest r;
    r.project = v.projectName("project");
    r.sinceRound = v.u64("since_round");
    r.limit = v.u64("limit", 1, kMaxMetricRows);
    return r;
}

void MetricsReply::write(MapWriter& w) const
{
    w.array("rows", arrayOf(rows));
}

MetricsReply MetricsReply::read(MapView v)
{
    return {readAll<MetricRow>(v, "rows", kMaxMetricRows)};
}

void LeaderboardRequest::write(MapWriter& w) const
{
    w.str("project", project).u64("limit", limit);
}

LeaderboardRequest LeaderboardRequest::read(MapView v)
{
    LeaderboardRequest r;
    r.project = v.projectName("project");
    r.limit = v.u64("limit", 1, kMaxLeaderboardRows);
    return r;
}

void LeaderboardReply::write(MapWriter& w) const
{
    w.array("rows", arrayOf(rows));
}

LeaderboardReply LeaderboardReply::read(MapView v)
{
    return {readAll<ContributorRow>(v, "rows", kMaxLeaderboardRows)};
}

void MyStatsRequest::write(MapWriter& w) const
{
    w.str("project", project);
}

MyStatsRequest MyStatsRequest::read(MapView v)
{
    return {v.projectName("project")};
}

void MyStatsReply::write(MapWriter& w) const
{
    w.map("stats", mapOf(stats)).u64("rank", rank).u64("contributors", contributors);
    w.u64("project_tokens", projectTokens);
}

MyStatsReply MyStatsReply::read(MapView v)
{
    MyStatsReply r;
    r.stats = ContributorRow::read(v.map("stats"));
    r.rank = v.u64("rank");
    r.contributors = v.u64("contributors");
    r.projectTokens = v.u64("project_tokens");
    return r;
}

} // namespace crowdtrain::net
