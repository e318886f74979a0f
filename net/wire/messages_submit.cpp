#include "net/wire/messages_submit.h"

#include "net/wire/limits.h"

namespace crowdtrain::net {

namespace {

constexpr uint64_t kInt8BlockElements = 256;

} // namespace

uint64_t payloadBytes(std::string_view codec, uint64_t elements)
{
    if (elements > kMaxElements)
        return 0;
    if (codec == kCodecFp32)
        return 4 * elements;
    if (codec == kCodecFp16)
        return 2 * elements;
    if (codec == kCodecInt8)
        return 4 * ((elements + kInt8BlockElements - 1) / kInt8BlockElements) + elements;
    return 0;
}

void UploadChunkRequest::write(MapWriter& w) const
{
    w.str("project", project).str("session", session).u64("task_id", taskId).u64("index", index).bin("data", data);
}

UploadChunkRequest UploadChunkRequest::read(MapView v)
{
    UploadChunkRequest r;
    r.project = v.projectName("project");
    r.session = v.str("session", {kMaxSessionChars});
    r.taskId = v.u64("task_id");
    r.index = v.u64("index", 0, kMaxChunkCount - 1);
    r.data = v.bin("data", kMaxChunkBytes, 1);
    return r;
}

void UploadChunkReply::write(MapWriter& w) const
{
    w.u64("task_id", taskId).u64("next_index", nextIndex).u64("received_bytes", receivedBytes);
}

UploadChunkReply UploadChunkReply::read(MapView v)
{
    UploadChunkReply r;
    r.taskId = v.u64("task_id");
    r.nextIndex = v.u64("next_index", 0, kMaxChunkCount);
    r.receivedBytes = v.u64("received_bytes", 0, kMaxResourceBytes);
    return r;
}

void SubmitRequest::write(MapWriter& w) const
{
    w.str("project", project).str("session", session).u64("task_id", taskId).u64("round", round);
    w.u64("version", version).u64("tokens", tokens).u64("compute_ms", computeMs).f64("train_loss", trainLoss);
    w.str("codec", codec).u64("elements", elements).u64("total_bytes", totalBytes).u64("chunks", chunks);
    w.str("sha256", sha256);
}

SubmitRequest SubmitRequest::read(MapView v)
{
    SubmitRequest r;
    r.project = v.projectName("project");
    r.session = v.str("session", {kMaxSessionChars});
    r.taskId = v.u64("task_id");
    r.round = v.u64("round");
    r.version = v.u64("version");
    r.tokens = v.u64("tokens", 1, UINT64_MAX);
    r.computeMs = v.u64("compute_ms");
    r.trainLoss = v.f64("train_loss", 0, 1e6);
    r.codec = readCodec(v, "codec");
    r.elements = v.u64("elements", 1, kMaxElements);
    r.totalBytes = v.u64("total_bytes", 1, kMaxResourceBytes);
    // A sparse payload's size depends on the model's tensors: the coordinator checks it.
    if (!v.context().failed() && r.codec != kCodecSparse && r.totalBytes != payloadBytes(r.codec, r.elements))
        v.fail("total_bytes",
            "must be " + std::to_string(payloadBytes(r.codec, r.elements)) + " for " + std::to_string(r.elements)
                + " elements in " + r.codec);
    r.chunks = v.u64("chunks", 1, kMaxChunkCount);
    r.sha256 = v.sha256Hex("sha256");
    return r;
}

void SubmitReply::write(MapWriter& w) const
{
    w.u64("task_id", taskId).u64("round", round).u64("version", version);
}

SubmitReply SubmitReply::read(MapView v)
{
    SubmitReply r;
    r.taskId = v.u64("task_id");
    r.round = v.u64("round");
    r.version = v.u64("version");
    return r;
}

void GetUpdateRequest::write(MapWriter& w) const
{
    w.str("project", project).u64("from_version", fromVersion);
}

GetUpdateRequest GetUpdateRequest::read(MapView v)
{
    GetUpdateRequest r;
    r.project = v.projectName("project");
    r.fromVersion = v.u64("from_version");
    return r;
}

void GetUpdateReply::write(MapWriter& w) const
{
    w.u64("from_version", fromVersion).u64("to_version", toVersion).str("codec", codec).u64("elements", elements);
    w.str("resource", resource).u64("bytes", bytes).str("sha256", sha256).str("state_sha256", stateSha256);
}

GetUpdateReply GetUpdateReply::read(MapView v)
{
    GetUpdateReply r;
    r.fromVersion = v.u64("from_version", 0, UINT64_MAX - 1);
    r.toVersion = v.u64("to_version");
    if (!v.context().failed() && r.toVersion != r.fromVersion + 1)
        v.fail("to_version", "must be from_version + 1");
    r.codec = readCodec(v, "codec");
    r.elements = v.u64("elements", 1, kMaxElements);
    r.resource = v.str("resource", {kMaxResourceNameChars});
    r.bytes = v.u64("bytes", 1, kMaxResourceBytes);
    if (!v.context().failed() && r.codec != kCodecSparse && r.bytes != payloadBytes(r.codec, r.elements))
        v.fail("bytes", "must be " + std::to_string(payloadBytes(r.codec, r.elements)) + " for the codec");
    r.sha256 = v.sha256Hex("sha256");
    r.stateSha256 = v.sha256Hex("state_sha256");
    return r;
}

} // namespace crowdtrain::net
