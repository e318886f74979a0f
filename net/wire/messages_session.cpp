#include "net/wire/messages_session.h"

#include "net/wire/limits.h"

namespace crowdtrain::net {

void ListProjectsReply::write(MapWriter& w) const
{
    w.array("projects", arrayOf(projects));
}

ListProjectsReply ListProjectsReply::read(MapView v)
{
    return {readAll<ProjectInfo>(v, "projects", kMaxProjects)};
}

void JoinRequest::write(MapWriter& w) const
{
    w.str("project", project).str("display_name", displayName);
    w.str("client_version", clientVersion).str("device", device);
}

JoinRequest JoinRequest::read(MapView v)
{
    JoinRequest r;
    r.project = v.projectName("project");
    r.displayName = v.displayText("display_name", {kMaxDisplayNameChars, 0});
    r.clientVersion = v.str("client_version", {kMaxClientVersionChars});
    r.device = v.displayText("device", {kMaxDeviceChars, 0});
    return r;
}

void SparseSettings::write(MapWriter& w) const
{
    w.u64("chunk", chunk).u64("k", k).f64("decay", decay).u64("update_bits", updateBits);
}

SparseSettings SparseSettings::read(MapView v)
{
    SparseSettings s;
    s.chunk = v.u64("chunk", 64, 32768);
    if (!v.context().failed() && (s.chunk & (s.chunk - 1)) != 0)
        v.fail("chunk", "must be a power of two");
    s.k = v.u64("k", 1, s.chunk);
    s.decay = v.f64("decay", 0.0, 1.0);
    s.updateBits = v.has("update_bits") ? v.u64("update_bits", 4, 8) : 8;
    if (!v.context().failed() && s.updateBits != 4 && s.updateBits != 8)
        v.fail("update_bits", "must be 4 or 8");
    return s;
}

void SeedInit::write(MapWriter& w) const
{
    w.u64("seed", seed).str("sha256", sha256);
}

SeedInit SeedInit::read(MapView v)
{
    SeedInit s;
    s.seed = v.u64("seed");
    s.sha256 = v.sha256Hex("sha256");
    return s;
}

void JoinReply::write(MapWriter& w) const
{
    w.str("session", session).map("project", mapOf(project)).array("manifest", arrayOf(manifest));
    w.str("manifest_sha256", manifestSha256).u64("version", version).str("state_resource", stateResource);
    w.str("state_sha256", stateSha256).u64("state_bytes", stateBytes).u64("chunk_bytes", chunkBytes);
    w.str("codec", codec).map("inner", mapOf(inner));
    w.u64("heartbeat_interval_ms", heartbeatIntervalMs).u64("heartbeat_liveness", heartbeatLiveness);
    w.u64("events_port", eventsPort);
    if (sparse)
        w.map("sparse", mapOf(*sparse));
    if (init)
        w.map("init", mapOf(*init));
    if (stateTorrent)
        w.map("state_torrent", mapOf(*stateTorrent));
}

JoinReply JoinReply::read(MapView v)
{
    JoinReply r;
    r.session = v.str("session", {kMaxSessionChars});
    r.project = ProjectInfo::read(v.map("project"));
    r.manifest = readAll<TensorSpec>(v, "manifest", kMaxManifestTensors);
    if (!v.context().failed() && r.manifest.empty())
        v.fail("manifest", "at least one tensor");
    r.manifestSha256 = v.sha256Hex("manifest_sha256");
    r.version = v.u64("version");
    r.stateResource = v.str("state_resource", {kMaxResourceNameChars});
    r.stateSha256 = v.sha256Hex("state_sha256");
    r.stateBytes = v.u64("state_bytes", 4, kMaxResourceBytes);
    if (!v.context().failed()) {
        const uint64_t elements = manifestElements(r.manifest);
        if (elements > kMaxElements || r.stateBytes != 4 * elements)
            v.fail("state_bytes", "must be 4 x the manifest's " + std::to_string(elements) + " elements");
    }
    r.chunkBytes = v.u64("chunk_bytes", 1, kMaxChunkBytes);
    r.codec = readCodec(v, "codec");
    r.inner = InnerSettings::read(v.map("inner"));
    r.heartbeatIntervalMs = v.u64("heartbeat_interval_ms", kMinHeartbeatIntervalMs, kMaxHeartbeatIntervalMs);
    r.heartbeatLiveness = v.u64("heartbeat_liveness", kMinHeartbeatLiveness, kMaxHeartbeatLiveness);
    r.eventsPort = v.has("events_port") ? v.u64("events_port", 0, 65535) : 0;
    if (!v.context().failed() && r.codec == kCodecSparse)
        r.sparse = SparseSettings::read(v.map("sparse"));
    if (!v.context().failed() && v.has("init"))
        r.init = SeedInit::read(v.map("init"));
    if (!v.context().failed() && v.has("state_torrent"))
        r.stateTorrent = TorrentRef::read(v.map("state_torrent"));
    return r;
}

void HeartbeatRequest::write(MapWriter& w) const
{
    w.str("project", project).str("session", session).u64("version", version);
}

HeartbeatRequest HeartbeatRequest::read(MapView v)
{
    HeartbeatRequest r;
    r.project = v.projectName("project");
    r.session = v.str("session", {kMaxSessionChars});
    r.version = v.u64("version");
    return r;
}

void HeartbeatReply::write(MapWriter& w) const
{
    w.u64("version", version).u64("round", round).str("state", state).boolean("wrap_up", wrapUp);
}

HeartbeatReply HeartbeatReply::read(MapView v)
{
    HeartbeatReply r;
    r.version = v.u64("version");
    r.round = v.u64("round");
    r.state = v.oneOf("state", {kStateTrain, kStateWait});
    r.wrapUp = v.has("wrap_up") && v.boolean("wrap_up");
    return r;
}

void LeaveRequest::write(MapWriter& w) const
{
    w.str("project", project).str("session", session);
}

LeaveRequest LeaveRequest::read(MapView v)
{
    LeaveRequest r;
    r.project = v.projectName("project");
    r.session = v.str("session", {kMaxSessionChars});
    return r;
}

void GetTaskRequest::write(MapWriter& w) const
{
    w.str("project", project).str("session", session).u64("version", version);
    if (ahead)
        w.boolean("ahead", true);
}

GetTaskRequest GetTaskRequest::read(MapView v)
{
    GetTaskRequest r;
    r.project = v.projectName("project");
    r.session = v.str("session", {kMaxSessionChars});
    r.version = v.u64("version");
    r.ahead = v.has("ahead") && v.boolean("ahead");
    return r;
}

void GetTaskReply::write(MapWriter& w) const
{
    if (task)
        w.str("status", "assigned").map("task", mapOf(*task));
    else
        w.str("status", "wait").u64("retry_after_ms", retryAfterMs);
}

GetTaskReply GetTaskReply::read(MapView v)
{
    GetTaskReply r;
    const std::string status = v.oneOf("status", {"assigned", "wait"});
    if (status == "assigned")
        r.task = Task::read(v.map("task"));
    else if (status == "wait")
        r.retryAfterMs = v.u64("retry_after_ms", 0, kMaxDelayMs);
    return r;
}

} // namespace crowdtrain::net
