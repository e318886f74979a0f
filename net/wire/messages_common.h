#pragma once

// Records shared by several messages of protocol version 1 (docs/protocol.md,
// section "Records"). Plain data; `read` validates every field into the view's
// DecodeContext (see msgpack_io.h).

#include "net/wire/msgpack_io.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace crowdtrain::net {

// Payload codec names (byte layouts in docs/protocol.md).
inline constexpr std::string_view kCodecInt8 = "int8";
inline constexpr std::string_view kCodecFp16 = "fp16";
inline constexpr std::string_view kCodecFp32 = "fp32";
// Sizes depend on the model's tensors and the join reply's `sparse` settings.
inline constexpr std::string_view kCodecSparse = "sparse";
std::string readCodec(MapView& view, std::string_view key);

template <typename T> MapWriter mapOf(const T& value)
{
    MapWriter writer;
    value.write(writer);
    return writer;
}

template <typename T> ArrayWriter arrayOf(const std::vector<T>& values)
{
    ArrayWriter writer;
    for (const T& value : values)
        writer.map(mapOf(value));
    return writer;
}

template <typename T> std::vector<T> readAll(MapView& view, std::string_view key, std::size_t maxCount)
{
    std::vector<T> values;
    for (MapView& element : view.maps(key, maxCount))
        values.push_back(T::read(element));
    return values;
}

struct ModelConfig {
    uint64_t nLayer = 0;
    uint64_t nHead = 0;
    uint64_t nEmbd = 0;
    uint64_t blockSize = 0;
    uint64_t vocabSize = 0;

    void write(MapWriter& w) const;
    static ModelConfig read(MapView v);
    bool operator==(const ModelConfig&) const = default;
};

// A published file's torrent (net/swarm): fetch `resource` (the .torrent's
// bytes) and join the swarm of `infoHash`; `swarm_peers` says who holds it.
struct TorrentRef {
    std::string infoHash; // v1 info-hash, 40 lowercase hex digits
    std::string infoHashV2; // v2 info-hash, 64 lowercase hex digits
    std::string magnet; // the same as a magnet link
    std::string resource; // "torrent/<the file's resource>"
    void write(MapWriter& w) const;
    static TorrentRef read(MapView v);
    bool operator==(const TorrentRef&) const = default;
};

struct FileInfo {
    std::string name; // file name, no folders
    uint64_t bytes = 0;
    std::string sha256;
    std::string resource; // resource name for describe/fetch
    std::optional<TorrentRef> torrent; // when the hub seeds it (large files)

    void write(MapWriter& w) const;
    static FileInfo read(MapView v);
    bool operator==(const FileInfo&) const = default;
};

struct ProjectInfo {
    std::string name; // [a-z0-9-]{1,64}
    std::string description;
    ModelConfig model;
    std::string codec; // "int8" | "fp16" | "fp32"
    uint64_t round = 0; // the round in progress
    uint64_t version = 0; // outer steps applied (theta_v)
    uint64_t tokensTrained = 0;
    uint64_t volunteersOnline = 0;
    std::optional<double> valLoss; // latest validation loss, none before the first evaluation
    // Optional on the wire (absent: 0, "", "everyone", none, empty).
    uint64_t parameters = 0;
    uint64_t tokenGoal = 0; // 0: no goal
    std::string license;
    std::string checkpointAccess = "everyone"; // "everyone" | "participants" | "nobody"
    std::optional<uint64_t> newestCheckpoint; // round of the newest published checkpoint
    std::vector<FileInfo> tokenizer; // the tokenizer's files, served as resources

    void write(MapWriter& w) const;
    static ProjectInfo read(MapView v);
    bool operator==(const ProjectInfo&) const = default;
};

struct TensorSpec {
    std::string name;
    std::vector<uint64_t> shape;

    void write(MapWriter& w) const;
    static TensorSpec read(MapView v);
    bool operator==(const TensorSpec&) const = default;
};

// The canonical text of a manifest, one line per tensor "<name> <d0>x<d1>...\n"
// ("<name> scalar\n" for rank 0); its SHA-256 is the manifest fingerprint.
std::string manifestText(const std::vector<TensorSpec>& manifest);
// Sum over tensors of the product of the shape (P); UINT64_MAX on overflow.
uint64_t manifestElements(const std::vector<TensorSpec>& manifest);

struct InnerSettings {
    uint64_t steps = 0; // H
    uint64_t batchSize = 0;
    uint64_t blockSize = 0;
    double learningRate = 0;
    double minLr = 0;
    uint64_t warmupIters = 0;
    // Inner steps of the whole project over which the rate decays (cosine)
    // to minLr, counted globally: step i of a task from version v is
    // v * steps + i. 0: no decay (warmup, then learningRate).
    uint64_t lrDecayIters = 0;
    double beta1 = 0;
    double beta2 = 0;
    double weightDecay = 0;
    double gradClip = 0; // 0: no clipping

    void write(MapWriter& w) const;
    static InnerSettings read(MapView v);
    bool operator==(const InnerSettings&) const = default;
};

struct ShardRange {
    std::string shard; // shard file name in the project's data folder
    uint64_t beginToken = 0;
    uint64_t endToken = 0; // exclusive, > beginToken

    bool operator==(const ShardRange&) const = default;
};

struct Task {
    uint64_t taskId = 0;
    uint64_t round = 0;
    uint64_t version = 0; // the theta_v to start from
    std::vector<ShardRange> shards;
    uint64_t innerSteps = 0;
    uint64_t deadlineMs = 0; // from the reply to the deadline of the submit

    void write(MapWriter& w) const;
    static Task read(MapView v);
    bool operator==(const Task&) const = default;
};

// The share of accepted work one kind of device trained (as volunteers
// named their device in `join`).
struct DeviceShare {
    std::string device; // "CPU", "NVIDIA GeForce RTX 4090, 24 GiB", "unknown"
    uint64_t volunteers = 0; // distinct keys
    uint64_t tokens = 0;

    void write(MapWriter& w) const;
    static DeviceShare read(MapView v);
    bool operator==(const DeviceShare&) const = default;
};

struct CheckpointInfo {
    uint64_t round = 0;
    uint64_t version = 0;
    uint64_t tokens = 0;
    std::optional<double> valLoss;
    uint64_t createdMs = 0; // Unix time in milliseconds
    std::vector<FileInfo> files;
    std::vector<DeviceShare> devices; // who trained round R, most tokens first

    void write(MapWriter& w) const;
    static CheckpointInfo read(MapView v);
    bool operator==(const CheckpointInfo&) const = default;
};

struct MetricRow {
    uint64_t round = 0;
    uint64_t tokens = 0; // tokens trained up to the end of the round
    std::optional<double> trainLoss;
    std::optional<double> valLoss;
    uint64_t volunteers = 0;
    uint64_t timeMs = 0; // Unix time in milliseconds of the round's close

    void write(MapWriter& w) const;
    static MetricRow read(MapView v);
    bool operator==(const MetricRow&) const = default;
};

struct ContributorRow {
    std::string displayName;
    std::string publicKey; // Z85
    uint64_t tokens = 0;
    uint64_t roundsAccepted = 0;
    uint64_t roundsRejected = 0;
    double computeSeconds = 0;
    std::string device; // from its latest join ("" when it named none)

    void write(MapWriter& w) const;
    static ContributorRow read(MapView v);
    bool operator==(const ContributorRow&) const = default;
};

} // namespace crowdtrain::net
