#pragma once

// Submission and update messages of protocol version 1: upload_chunk, submit,
// get_update (docs/protocol.md). Plain data.

#include "net/wire/messages_common.h"

namespace crowdtrain::net {

// Bytes of a payload of `elements` values in `codec` (the layouts of
// docs/protocol.md); 0 for an unknown codec or an overflow.
uint64_t payloadBytes(std::string_view codec, uint64_t elements);

// One piece of the encoded pseudo-gradient of a task, in order from index 0.
struct UploadChunkRequest {
    static constexpr std::string_view kType = "upload_chunk";
    std::string project;
    std::string session;
    uint64_t taskId = 0;
    uint64_t index = 0;
    std::string data; // 1 .. kMaxChunkBytes; every chunk but the last is chunk_bytes long
    void write(MapWriter& w) const;
    static UploadChunkRequest read(MapView v);
    bool operator==(const UploadChunkRequest&) const = default;
};

struct UploadChunkReply {
    static constexpr std::string_view kType = "upload_chunk";
    uint64_t taskId = 0;
    uint64_t nextIndex = 0; // the index the server expects next
    uint64_t receivedBytes = 0;
    void write(MapWriter& w) const;
    static UploadChunkReply read(MapView v);
    bool operator==(const UploadChunkReply&) const = default;
};

// Closes an upload: describes the payload the chunks made up.
struct SubmitRequest {
    static constexpr std::string_view kType = "submit";
    std::string project;
    std::string session;
    uint64_t taskId = 0;
    uint64_t round = 0;
    uint64_t version = 0; // the theta_v the task started from
    uint64_t tokens = 0; // tokens processed (the weight of the submission)
    uint64_t computeMs = 0;
    double trainLoss = 0; // mean inner loss
    std::string codec;
    uint64_t elements = 0; // P
    uint64_t totalBytes = 0; // payloadBytes(codec, elements)
    uint64_t chunks = 0; // upload chunks sent
    std::string sha256; // of the whole payload
    void write(MapWriter& w) const;
    static SubmitRequest read(MapView v);
    bool operator==(const SubmitRequest&) const = default;
};

struct SubmitReply {
    static constexpr std::string_view kType = "submit";
    uint64_t taskId = 0;
    uint64_t round = 0;
    uint64_t version = 0;
    void write(MapWriter& w) const;
    static SubmitReply read(MapView v);
    bool operator==(const SubmitReply&) const = default;
};

struct GetUpdateRequest {
    static constexpr std::string_view kType = "get_update";
    std::string project;
    uint64_t fromVersion = 0;
    void write(MapWriter& w) const;
    static GetUpdateRequest read(MapView v);
    bool operator==(const GetUpdateRequest&) const = default;
};

// The published update theta_from -> theta_{from+1}, fetched as a resource.
struct GetUpdateReply {
    static constexpr std::string_view kType = "get_update";
    uint64_t fromVersion = 0;
    uint64_t toVersion = 0; // fromVersion + 1
    std::string codec; // "int8" in version 1
    uint64_t elements = 0;
    std::string resource;
    uint64_t bytes = 0; // payloadBytes(codec, elements)
    std::string sha256; // of the encoded update
    std::string stateSha256; // of theta_to's P float32 (little-endian)
    void write(MapWriter& w) const;
    static GetUpdateReply read(MapView v);
    bool operator==(const GetUpdateReply&) const = default;
};

} // namespace crowdtrain::net
