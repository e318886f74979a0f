#pragma once

// Catalog and volunteer session messages of protocol version 1:
// list_projects, join, heartbeat, leave, get_task (docs/protocol.md).
// A request struct and its reply struct share kType. Plain data.

#include "net/wire/messages_common.h"

namespace crowdtrain::net {

struct ListProjectsRequest {
    static constexpr std::string_view kType = "list_projects";
    void write(MapWriter&) const { }
    static ListProjectsRequest read(MapView) { return {}; }
    bool operator==(const ListProjectsRequest&) const = default;
};

struct ListProjectsReply {
    static constexpr std::string_view kType = "list_projects";
    std::vector<ProjectInfo> projects;
    void write(MapWriter& w) const;
    static ListProjectsReply read(MapView v);
    bool operator==(const ListProjectsReply&) const = default;
};

// The volunteer's identity is the Curve public key of its connection, never
// a field.
struct JoinRequest {
    static constexpr std::string_view kType = "join";
    std::string project;
    std::string displayName; // may be empty
    std::string clientVersion;
    std::string device; // e.g. "NVIDIA RTX 4090, 24 GiB" or "CPU"
    void write(MapWriter& w) const;
    static JoinRequest read(MapView v);
    bool operator==(const JoinRequest&) const = default;
};

// The sparse codec's parameters (docs/protocol.md §7 "sparse").
struct SparseSettings {
    uint64_t chunk = 0; // a power of two in [64, 32768]
    uint64_t k = 0; // [1, chunk]
    double decay = 0; // [0, 1]
    uint64_t updateBits = 8; // 4 or 8 (absent on read: 8)
    void write(MapWriter& w) const;
    static SparseSettings read(MapView v);
    bool operator==(const SparseSettings&) const = default;
};

// theta_0 as the spec's seed makes it (docs/protocol.md §4 "init").
struct SeedInit {
    uint64_t seed = 0;
    std::string sha256; // of theta_0's flat fp32 bytes
    void write(MapWriter& w) const;
    static SeedInit read(MapView v);
    bool operator==(const SeedInit&) const = default;
};

struct JoinReply {
    static constexpr std::string_view kType = "join";
    std::string session; // opaque, sent back with every session request
    ProjectInfo project;
    std::vector<TensorSpec> manifest;
    std::string manifestSha256; // SHA-256 of manifestText(manifest)
    uint64_t version = 0; // theta_v now
    std::string stateResource; // resource holding theta_v as P float32
    std::string stateSha256;
    uint64_t stateBytes = 0; // 4 * P
    uint64_t chunkBytes = 0; // chunk size of downloads and of uploads
    std::string codec; // of submissions
    InnerSettings inner;
    uint64_t heartbeatIntervalMs = 0;
    uint64_t heartbeatLiveness = 0;
    // The TCP port of the coordinator's PUB socket on the host the volunteer
    // reached (0: not known; optional on the wire).
    uint64_t eventsPort = 0;
    // Present exactly when codec is "sparse".
    std::optional<SparseSettings> sparse;
    // Present when theta_0 came from a seed (not an import): a volunteer may
    // build it itself and replay the updates from version 0.
    std::optional<SeedInit> init;
    // Present when the coordinator also seeds the state in its swarm: the
    // torrent of one file named stateResource holding the stateBytes.
    std::optional<TorrentRef> stateTorrent;
    void write(MapWriter& w) const;
    static JoinReply read(MapView v);
    bool operator==(const JoinReply&) const = default;
};

struct HeartbeatRequest {
    static constexpr std::string_view kType = "heartbeat";
    std::string project;
    std::string session;
    uint64_t version = 0; // the theta_v the volunteer holds
    void write(MapWriter& w) const;
    static HeartbeatRequest read(MapView v);
    bool operator==(const HeartbeatRequest&) const = default;
};

inline constexpr std::string_view kStateTrain = "train";
inline constexpr std::string_view kStateWait = "wait";

struct HeartbeatReply {
    static constexpr std::string_view kType = "heartbeat";
    uint64_t version = 0;
    uint64_t round = 0;
    std::string state; // "train" (work is available or under way) | "wait"
    // The round is wrapping up and the volunteer holds an open task: submit
    // the steps done so far (optional on the wire, false when absent).
    bool wrapUp = false;
    void write(MapWriter& w) const;
    static HeartbeatReply read(MapView v);
    bool operator==(const HeartbeatReply&) const = default;
};

struct LeaveRequest {
    static constexpr std::string_view kType = "leave";
    std::string project;
    std::string session;
    void write(MapWriter& w) const;
    static LeaveRequest read(MapView v);
    bool operator==(const LeaveRequest&) const = default;
};

struct LeaveReply {
    static constexpr std::string_view kType = "leave";
    void write(MapWriter&) const { }
    static LeaveReply read(MapView) { return {}; }
    bool operator==(const LeaveReply&) const = default;
};

struct GetTaskRequest {
    static constexpr std::string_view kType = "get_task";
    std::string project;
    std::string session;
    uint64_t version = 0; // the theta_v the volunteer holds
    // A task for the round after the open one, to train while it closes.
    bool ahead = false;
    void write(MapWriter& w) const;
    static GetTaskRequest read(MapView v);
    bool operator==(const GetTaskRequest&) const = default;
};

// Either a task ("status": "assigned") or a wait ("status": "wait").
struct GetTaskReply {
    static constexpr std::string_view kType = "get_task";
    std::optional<Task> task;
    uint64_t retryAfterMs = 0; // when there is no task
    void write(MapWriter& w) const;
    static GetTaskReply read(MapView v);
    bool operator==(const GetTaskReply&) const = default;
};

} // namespace crowdtrain::net
