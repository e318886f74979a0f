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

} // namespace crowdtrain::net
