#pragma once

// Progress and contribution messages of protocol version 1: list_checkpoints,
// metrics, leaderboard, my_stats (docs/protocol.md). Plain data.

#include "net/wire/messages_common.h"

namespace crowdtrain::net {

struct ListCheckpointsRequest {
    static constexpr std::string_view kType = "list_checkpoints";
    std::string project;
    void write(MapWriter& w) const;
    static ListCheckpointsRequest read(MapView v);
    bool operator==(const ListCheckpointsRequest&) const = default;
};

struct ListCheckpointsReply {
    static constexpr std::string_view kType = "list_checkpoints";
    std::vector<CheckpointInfo> checkpoints; // oldest first
    void write(MapWriter& w) const;
    static ListCheckpointsReply read(MapView v);
    bool operator==(const ListCheckpointsReply&) const = default;
};

// Rows of rounds > sinceRound, oldest first, at most `limit` of them; a client
// pages by asking again from the last round it got.
struct MetricsRequest {
    static constexpr std::string_view kType = "metrics";
    std::string project;
    uint64_t sinceRound = 0;
    uint64_t limit = 0; // 1 .. kMaxMetricRows
    void write(MapWriter& w) const;
    static MetricsRequest read(MapView v);
    bool operator==(const MetricsRequest&) const = default;
};

struct MetricsReply {
    static constexpr std::string_view kType = "metrics";
    std::vector<MetricRow> rows;
    void write(MapWriter& w) const;
    static MetricsReply read(MapView v);
    bool operator==(const MetricsReply&) const = default;
};

struct LeaderboardRequest {
    static constexpr std::string_view kType = "leaderboard";
    std::string project;
    uint64_t limit = 0; // 1 .. kMaxLeaderboardRows
    void write(MapWriter& w) const;
    static LeaderboardRequest read(MapView v);
    bool operator==(const LeaderboardRequest&) const = default;
};

struct LeaderboardReply {
    static constexpr std::string_view kType = "leaderboard";
    std::vector<ContributorRow> rows; // most tokens first
    void write(MapWriter& w) const;
    static LeaderboardReply read(MapView v);
    bool operator==(const LeaderboardReply&) const = default;
};

// The asking volunteer's own row (identified by its Curve key).
struct MyStatsRequest {
    static constexpr std::string_view kType = "my_stats";
    std::string project;
    void write(MapWriter& w) const;
    static MyStatsRequest read(MapView v);
    bool operator==(const MyStatsRequest&) const = default;
};

struct MyStatsReply {
    static constexpr std::string_view kType = "my_stats";
    ContributorRow stats;
    uint64_t rank = 0; // 1-based place by tokens; 0 before any accepted work
    uint64_t contributors = 0; // volunteers with accepted work
    uint64_t projectTokens = 0; // all tokens trained in the project
    void write(MapWriter& w) const;
    static MyStatsReply read(MapView v);
    bool operator==(const MyStatsReply&) const = default;
};

} // namespace crowdtrain::net
