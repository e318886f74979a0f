#pragma once

// Chunked downloads of protocol version 1: describe, fetch (docs/protocol.md,
// "Chunked transfer"). A resource name always denotes the same bytes
// ("state/12", "update/12", "checkpoint/40/model.safetensors"); a resource
// that is gone is "not_found". Plain data.

#include "net/wire/messages_common.h"

namespace crowdtrain::net {

// Chunks of `bytes` split in pieces of chunkBytes (0 for an empty resource).
uint64_t chunkCountFor(uint64_t bytes, uint64_t chunkBytes);

struct DescribeRequest {
    static constexpr std::string_view kType = "describe";
    std::string project;
    std::string resource;
    void write(MapWriter& w) const;
    static DescribeRequest read(MapView v);
    bool operator==(const DescribeRequest&) const = default;
};

struct ResourceDescription {
    static constexpr std::string_view kType = "describe";
    std::string resource;
    uint64_t bytes = 0;
    uint64_t chunkBytes = 0;
    uint64_t chunkCount = 0; // chunkCountFor(bytes, chunkBytes)
    std::string sha256; // of all bytes
    std::vector<std::string> chunkSha256; // one per chunk, in order
    void write(MapWriter& w) const;
    static ResourceDescription read(MapView v);
    // The length of chunk `index` (the last one may be shorter).
    uint64_t chunkLength(uint64_t index) const;
    bool operator==(const ResourceDescription&) const = default;
};

struct FetchRequest {
    static constexpr std::string_view kType = "fetch";
    std::string project;
    std::string resource;
    uint64_t index = 0;
    void write(MapWriter& w) const;
    static FetchRequest read(MapView v);
    bool operator==(const FetchRequest&) const = default;
};

struct FetchReply {
    static constexpr std::string_view kType = "fetch";
    std::string resource;
    uint64_t index = 0;
    std::string data;
    void write(MapWriter& w) const;
    static FetchReply read(MapView v);
    bool operator==(const FetchReply&) const = default;
};

// Who holds a torrent's file (docs/protocol.md, "Swarm"): the asker says
// where its BitTorrent session listens; the reply lists peers to dial.
struct SwarmPeersRequest {
    static constexpr std::string_view kType = "swarm_peers";
    std::string project;
    std::string infoHash; // v1, 40 lowercase hex digits
    uint64_t port = 0; // the asker's listening port, 0: it takes no connections
    bool seeding = false; // the asker has the whole file
    void write(MapWriter& w) const;
    static SwarmPeersRequest read(MapView v);
    bool operator==(const SwarmPeersRequest&) const = default;
};

struct SwarmPeer {
    std::string host; // an IP address; "" for the hub's own host (as the asker reaches it)
    uint64_t port = 0;
    bool seeding = false;
    void write(MapWriter& w) const;
    static SwarmPeer read(MapView v);
    bool operator==(const SwarmPeer&) const = default;
};

struct SwarmPeersReply {
    static constexpr std::string_view kType = "swarm_peers";
    std::vector<SwarmPeer> peers; // at most kMaxSwarmPeers
    void write(MapWriter& w) const;
    static SwarmPeersReply read(MapView v);
    bool operator==(const SwarmPeersReply&) const = default;
};

} // namespace crowdtrain::net
