#pragma once

// Every number of the wire contract, protocol version 1, in one place
// (docs/protocol.md quotes them). A peer that exceeds one of these limits is
// answered with an error and changes nothing; none of them is ever relaxed
// for a particular peer.

#include <cstddef>
#include <cstdint>

namespace crowdtrain::net {

inline constexpr uint64_t kProtocolVersion = 1;

// Whole frames. A request or reply is one ZeroMQ frame holding one msgpack
// map; the transport (ZMQ_MAXMSGSIZE) drops bigger frames before they are
// read, the decoder answers "too_large" for bigger buffers.
inline constexpr std::size_t kMaxRequestBytes = 8u << 20; // 8 MiB
inline constexpr std::size_t kMaxReplyBytes = 8u << 20; // 8 MiB
inline constexpr std::size_t kMaxEventBytes = 64u << 10; // 64 KiB (PUB body frame)
inline constexpr std::size_t kMaxTopicBytes = 128; // PUB topic frame

// Queues of the coordinator's ROUTER socket, per peer (ZMQ_SNDHWM and
// ZMQ_RCVHWM, in messages). A reply to a peer whose queue is full is
// dropped, so a peer that never reads costs the server at most about
// kMaxQueuedRepliesPerPeer replies (plus the kernel's socket buffer); a
// client keeps one request in flight and never comes near either.
inline constexpr std::size_t kMaxQueuedRepliesPerPeer = 8;
inline constexpr std::size_t kMaxQueuedRequestsPerPeer = 8;

// Chunked transfers (uploads and resource downloads).
inline constexpr std::size_t kMaxChunkBytes = 4u << 20; // 4 MiB of data per chunk
inline constexpr std::size_t kDefaultChunkBytes = 1u << 20; // 1 MiB: what servers use unless told otherwise
inline constexpr uint64_t kMaxChunkCount = 1u << 16; // chunks per resource or upload
inline constexpr uint64_t kMaxResourceBytes = uint64_t(kMaxChunkBytes) * kMaxChunkCount; // 256 GiB
inline constexpr uint64_t kMaxElements = uint64_t(1) << 36; // flat parameter vector length P

// Decoder caps of msgpack containers (net/wire/unpack.h).
inline constexpr std::size_t kMaxMapEntries = 64; // keys in any one map
inline constexpr std::size_t kMaxNestingDepth = 8;
inline constexpr std::size_t kMaxStringBytesAny = 64u << 10; // any one str, before field checks

// Strings, in bytes of UTF-8 (every str must be valid UTF-8).
inline constexpr std::size_t kMaxTypeChars = 32; // "type"
inline constexpr std::size_t kMaxProjectNameChars = 64; // project slug [a-z0-9-]{1,64}
inline constexpr std::size_t kMaxDescriptionChars = 4096;
inline constexpr std::size_t kMaxLicenseBytes = 256;
inline constexpr std::size_t kMaxTokenizerFiles = 8; // ProjectInfo.tokenizer
inline constexpr std::size_t kMaxDisplayNameChars = 64;
inline constexpr std::size_t kMaxClientVersionChars = 64;
inline constexpr std::size_t kMaxDeviceChars = 256;
inline constexpr std::size_t kMaxSessionChars = 64;
inline constexpr std::size_t kMaxResourceNameChars = 256;
inline constexpr std::size_t kMaxFileNameChars = 256;
inline constexpr std::size_t kMaxMagnetChars = 1024; // a torrent's magnet link
inline constexpr std::size_t kMaxSwarmPeers = 50; // swarm_peers reply
inline constexpr std::size_t kMaxPeerHostChars = 64; // an IPv4 or IPv6 address as text
inline constexpr std::size_t kMaxShardNameChars = 256;
inline constexpr std::size_t kMaxTensorNameChars = 256;
inline constexpr std::size_t kMaxCodecChars = 16;
inline constexpr std::size_t kMaxErrorCodeChars = 64;
inline constexpr std::size_t kMaxErrorMessageChars = 1024;
inline constexpr std::size_t kSha256HexChars = 64; // lowercase hex
inline constexpr std::size_t kCurveKeyChars = 40; // Z85 public key

// Lists.
inline constexpr std::size_t kMaxProjects = 256; // list_projects
inline constexpr std::size_t kMaxManifestTensors = 4096; // join manifest
inline constexpr std::size_t kMaxTensorRank = 8;
inline constexpr uint64_t kMaxTensorDim = uint64_t(1) << 32;
inline constexpr std::size_t kMaxShardRanges = 1024; // ranges in one task
inline constexpr std::size_t kMaxCheckpoints = 1024; // list_checkpoints
inline constexpr std::size_t kMaxCheckpointFiles = 64; // files of one checkpoint
inline constexpr std::size_t kMaxDeviceShares = 64; // device kinds listed for one checkpoint
inline constexpr std::size_t kMaxMetricRows = 4096; // one metrics reply
inline constexpr std::size_t kMaxLeaderboardRows = 1000; // one leaderboard reply

// Numbers.
inline constexpr uint64_t kMaxModelDim = uint64_t(1) << 20; // n_layer, n_head, n_embd, block_size, vocab_size
inline constexpr uint64_t kMinHeartbeatIntervalMs = 100;
inline constexpr uint64_t kMaxHeartbeatIntervalMs = 600'000;
inline constexpr uint64_t kMinHeartbeatLiveness = 1;
inline constexpr uint64_t kMaxHeartbeatLiveness = 100;
inline constexpr uint64_t kMaxDelayMs = 86'400'000; // deadline_ms, retry_after_ms: one day

} // namespace crowdtrain::net
