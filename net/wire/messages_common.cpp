#include "net/wire/messages_common.h"

#include "net/wire/limits.h"

#include <algorithm>

namespace crowdtrain::net {

namespace {

constexpr double kMaxLoss = 1e6;
constexpr double kMaxHyper = 1e6;

} // namespace

std::string readCodec(MapView& view, std::string_view key)
{
    return view.oneOf(key, {kCodecInt8, kCodecFp16, kCodecFp32, kCodecSparse});
}

void ModelConfig::write(MapWriter& w) const
{
    w.u64("n_layer", nLayer).u64("n_head", nHead).u64("n_embd", nEmbd);
    w.u64("block_size", blockSize).u64("vocab_size", vocabSize);
}

ModelConfig ModelConfig::read(MapView v)
{
    ModelConfig m;
    m.nLayer = v.u64("n_layer", 1, kMaxModelDim);
    m.nHead = v.u64("n_head", 1, kMaxModelDim);
    m.nEmbd = v.u64("n_embd", 1, kMaxModelDim);
    m.blockSize = v.u64("block_size", 1, kMaxModelDim);
    m.vocabSize = v.u64("vocab_size", 1, kMaxModelDim);
    if (!v.context().failed() && m.nEmbd % m.nHead != 0)
        v.fail("n_embd", "must be a multiple of n_head");
    return m;
}

void ProjectInfo::write(MapWriter& w) const
{
    w.str("name", name).str("description", description).map("model", mapOf(model)).str("codec", codec);
    w.u64("round", round).u64("version", version).u64("tokens_trained", tokensTrained);
    w.u64("volunteers_online", volunteersOnline).optF64("val_loss", valLoss);
    w.u64("parameters", parameters).u64("token_goal", tokenGoal).str("license", license);
    w.str("checkpoint_access", checkpointAccess);
    if (newestCheckpoint)
        w.u64("newest_checkpoint", *newestCheckpoint);
    ArrayWriter files;
    for (const FileInfo& file : tokenizer)
        files.map(mapOf(file));
    w.array("tokenizer", files);
}

ProjectInfo ProjectInfo::read(MapView v)
{
    ProjectInfo p;
    p.name = v.projectName("name");
    p.description = v.str("description", {kMaxDescriptionChars, 0});
    p.model = ModelConfig::read(v.map("model"));
    p.codec = readCodec(v, "codec");
    p.round = v.u64("round");
    p.version = v.u64("version");
    p.tokensTrained = v.u64("tokens_trained");
    p.volunteersOnline = v.u64("volunteers_online");
    p.valLoss = v.optF64("val_loss", 0, kMaxLoss);
    if (v.has("parameters"))
        p.parameters = v.u64("parameters");
    if (v.has("token_goal"))
        p.tokenGoal = v.u64("token_goal");
    if (v.has("license"))
        p.license = v.displayText("license", {kMaxLicenseBytes, 0});
    if (v.has("checkpoint_access"))
        p.checkpointAccess = v.oneOf("checkpoint_access", {"everyone", "participants", "nobody"});
    if (v.has("newest_checkpoint"))
        p.newestCheckpoint = v.u64("newest_checkpoint");
    if (v.has("tokenizer"))
        for (MapView file : v.maps("tokenizer", kMaxTokenizerFiles))
            p.tokenizer.push_back(FileInfo::read(file));
    return p;
}

void TensorSpec::write(MapWriter& w) const
{
    ArrayWriter dims;
    for (uint64_t d : shape)
        dims.u64(d);
    w.str("name", name).array("shape", dims);
}

TensorSpec TensorSpec::read(MapView v)
{
    TensorSpec t;
    t.name = v.str("name", {kMaxTensorNameChars});
    t.shape = v.u64s("shape", kMaxTensorRank, 1, kMaxTensorDim);
    return t;
}

std::string manifestText(const std::vector<TensorSpec>& manifest)
{
    std::string text;
    for (const TensorSpec& tensor : manifest) {
        text += tensor.name + ' ';
        if (tensor.shape.empty())
            text += "scalar";
        for (std::size_t i = 0; i < tensor.shape.size(); ++i)
            text += (i ? "x" : "") + std::to_string(tensor.shape[i]);
        text += '\n';
    }
    return text;
}

uint64_t manifestElements(const std::vector<TensorSpec>& manifest)
{
    uint64_t total = 0;
    for (const TensorSpec& tensor : manifest) {
        uint64_t count = 1;
        for (uint64_t d : tensor.shape)
            if (__builtin_mul_overflow(count, d, &count))
                return UINT64_MAX;
        if (__builtin_add_overflow(total, count, &total))
            return UINT64_MAX;
    }
    return total;
}

void InnerSettings::write(MapWriter& w) const
{
    w.u64("steps", steps).u64("batch_size", batchSize).u64("block_size", blockSize);
    w.f64("lr", learningRate).f64("min_lr", minLr).u64("warmup_iters", warmupIters);
    w.u64("lr_decay_iters", lrDecayIters);
    w.f64("beta1", beta1).f64("beta2", beta2).f64("weight_decay", weightDecay).f64("grad_clip", gradClip);
}

InnerSettings InnerSettings::read(MapView v)
{
    InnerSettings s;
    s.steps = v.u64("steps", 1, 1u << 30);
    s.batchSize = v.u64("batch_size", 1, 1u << 20);
    s.blockSize = v.u64("block_size", 1, kMaxModelDim);
    s.learningRate = v.f64("lr", 0, kMaxHyper);
    s.minLr = v.f64("min_lr", 0, kMaxHyper);
    s.warmupIters = v.u64("warmup_iters", 0, 1u << 30);
    s.lrDecayIters = v.has("lr_decay_iters") ? v.u64("lr_decay_iters", 0, uint64_t(1) << 50) : 0;
    s.beta1 = v.f64("beta1", 0, 1);
    s.beta2 = v.f64("beta2", 0, 1);
    s.weightDecay = v.f64("weight_decay", 0, kMaxHyper);
    s.gradClip = v.f64("grad_clip", 0, kMaxHyper);
    return s;
}

void Task::write(MapWriter& w) const
{
    // Each file name once (`files`, in order of first use), the pieces as
    // flat (file index, begin, end) triples: a task's 64 pieces of one
    // shard take ~0.4 kB instead of ~2.3 kB as maps (bench/RESULTS.md).
    std::vector<std::string_view> files;
    ArrayWriter pieces;
    for (const ShardRange& range : shards) {
        auto at = std::find(files.begin(), files.end(), std::string_view(range.shard));
        if (at == files.end())
            at = files.insert(files.end(), range.shard);
        pieces.u64(uint64_t(at - files.begin())).u64(range.beginToken).u64(range.endToken);
    }
    ArrayWriter names;
    for (const std::string_view file : files)
        names.str(file);
    w.u64("task_id", taskId).u64("round", round).u64("version", version);
    w.array("files", names).array("pieces", pieces);
    w.u64("inner_steps", innerSteps).u64("deadline_ms", deadlineMs);
}

Task Task::read(MapView v)
{
    Task t;
    t.taskId = v.u64("task_id");
    t.round = v.u64("round");
    t.version = v.u64("version");
    const std::vector<std::string> files = v.strs("files", kMaxShardRanges, {kMaxShardNameChars});
    const std::vector<uint64_t> pieces = v.u64s("pieces", 3 * kMaxShardRanges);
    if (!v.context().failed()) {
        if (files.empty())
            v.fail("files", "at least one file");
        else if (pieces.empty() || pieces.size() % 3 != 0)
            v.fail("pieces", "must be (file, begin, end) triples, at least one");
    }
    for (std::size_t i = 0; i + 2 < pieces.size() && !v.context().failed(); i += 3) {
        if (pieces[i] >= files.size())
            v.fail("pieces",
                "piece " + std::to_string(i / 3) + ": file " + std::to_string(pieces[i]) + " of "
                    + std::to_string(files.size()));
        else if (pieces[i + 2] <= pieces[i + 1])
            v.fail("pieces", "piece " + std::to_string(i / 3) + ": end must be greater than begin");
        else
            t.shards.push_back(ShardRange{files[pieces[i]], pieces[i + 1], pieces[i + 2]});
    }
    t.innerSteps = v.u64("inner_steps", 1, 1u << 30);
    t.deadlineMs = v.u64("deadline_ms", 1, kMaxDelayMs);
    return t;
}

void TorrentRef::write(MapWriter& w) const
{
    w.str("info_hash", infoHash).str("info_hash_v2", infoHashV2).str("magnet", magnet).str("resource", resource);
}

TorrentRef TorrentRef::read(MapView v)
{
    TorrentRef t;
    t.infoHash = v.str("info_hash", {40, 40});
    if (!v.context().failed() && !isInfoHashHex(t.infoHash))
        v.fail("info_hash", "expected 40 lowercase hex digits");
    t.infoHashV2 = v.sha256Hex("info_hash_v2");
    t.magnet = v.str("magnet", {kMaxMagnetChars});
    t.resource = v.str("resource", {kMaxResourceNameChars});
    return t;
}

void FileInfo::write(MapWriter& w) const
{
    w.str("name", name).u64("bytes", bytes).str("sha256", sha256).str("resource", resource);
    if (torrent)
        w.map("torrent", mapOf(*torrent));
}

FileInfo FileInfo::read(MapView v)
{
    FileInfo f;
    f.name = v.str("name", {kMaxFileNameChars});
    if (!v.context().failed() && (f.name.find('/') != std::string::npos || f.name == "." || f.name == ".."))
        v.fail("name", "must be a plain file name");
    f.bytes = v.u64("bytes", 0, kMaxResourceBytes);
    f.sha256 = v.sha256Hex("sha256");
    f.resource = v.str("resource", {kMaxResourceNameChars});
    if (!v.context().failed() && v.has("torrent"))
        f.torrent = TorrentRef::read(v.map("torrent"));
    return f;
}

void DeviceShare::write(MapWriter& w) const
{
    w.str("device", device).u64("volunteers", volunteers).u64("tokens", tokens);
}

DeviceShare DeviceShare::read(MapView v)
{
    DeviceShare d;
    d.device = v.displayText("device", {kMaxDeviceChars, 1});
    d.volunteers = v.u64("volunteers");
    d.tokens = v.u64("tokens");
    return d;
}

void CheckpointInfo::write(MapWriter& w) const
{
    w.u64("round", round).u64("version", version).u64("tokens", tokens).optF64("val_loss", valLoss);
    w.u64("created_ms", createdMs).array("files", arrayOf(files)).array("devices", arrayOf(devices));
}

CheckpointInfo CheckpointInfo::read(MapView v)
{
    CheckpointInfo c;
    c.round = v.u64("round");
    c.version = v.u64("version");
    c.tokens = v.u64("tokens");
    c.valLoss = v.optF64("val_loss", 0, kMaxLoss);
    c.createdMs = v.u64("created_ms");
    c.files = readAll<FileInfo>(v, "files", kMaxCheckpointFiles);
    if (v.has("devices")) // coordinators before 0.1.0's device shares send none
        c.devices = readAll<DeviceShare>(v, "devices", kMaxDeviceShares);
    return c;
}

void MetricRow::write(MapWriter& w) const
{
    w.u64("round", round).u64("tokens", tokens).optF64("train_loss", trainLoss).optF64("val_loss", valLoss);
    w.u64("volunteers", volunteers).u64("time_ms", timeMs);
}

MetricRow MetricRow::read(MapView v)
{
    MetricRow r;
    r.round = v.u64("round");
    r.tokens = v.u64("tokens");
    r.trainLoss = v.optF64("train_loss", 0, kMaxLoss);
    r.valLoss = v.optF64("val_loss", 0, kMaxLoss);
    r.volunteers = v.u64("volunteers");
    r.timeMs = v.u64("time_ms");
    return r;
}

void ContributorRow::write(MapWriter& w) const
{
    w.str("display_name", displayName).str("public_key", publicKey).u64("tokens", tokens);
    w.u64("rounds_accepted", roundsAccepted).u64("rounds_rejected", roundsRejected);
    w.f64("compute_seconds", computeSeconds).str("device", device);
}

ContributorRow ContributorRow::read(MapView v)
{
    ContributorRow r;
    r.displayName = v.str("display_name", {kMaxDisplayNameChars, 0});
    r.publicKey = v.curveKey("public_key");
    r.tokens = v.u64("tokens");
    r.roundsAccepted = v.u64("rounds_accepted");
    r.roundsRejected = v.u64("rounds_rejected");
    r.computeSeconds = v.f64("compute_seconds", 0, 1e15);
    if (v.has("device"))
        r.device = v.displayText("device", {kMaxDeviceChars, 0});
    return r;
}

} // namespace crowdtrain::net
