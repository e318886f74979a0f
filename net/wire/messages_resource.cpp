#include "net/wire/messages_resource.h"

#include "net/wire/limits.h"

namespace crowdtrain::net {

uint64_t chunkCountFor(uint64_t bytes, uint64_t chunkBytes)
{
    return chunkBytes == 0 ? 0 : bytes / chunkBytes + (bytes % chunkBytes != 0 ? 1 : 0);
}

void DescribeRequest::write(MapWriter& w) const
{
    w.str("project", project).str("resource", resource);
}

DescribeRequest DescribeRequest::read(MapView v)
{
    DescribeRequest r;
    r.project = v.projectName("project");
    r.resource = v.str("resource", {kMaxResourceNameChars});
    return r;
}

void ResourceDescription::write(MapWriter& w) const
{
    ArrayWriter hashes;
    for (const std::string& hash : chunkSha256)
        hashes.str(hash);
    w.str("resource", resource).u64("bytes", bytes).u64("chunk_bytes", chunkBytes).u64("chunk_count", chunkCount);
    w.str("sha256", sha256).array("chunk_sha256", hashes);
}

ResourceDescription ResourceDescription::read(MapView v)
{
    ResourceDescription r;
    r.resource = v.str("resource", {kMaxResourceNameChars});
    r.bytes = v.u64("bytes", 0, kMaxResourceBytes);
    r.chunkBytes = v.u64("chunk_bytes", 1, kMaxChunkBytes);
    r.chunkCount = v.u64("chunk_count", 0, kMaxChunkCount);
    if (!v.context().failed() && r.chunkCount != chunkCountFor(r.bytes, r.chunkBytes))
        v.fail("chunk_count", "must be " + std::to_string(chunkCountFor(r.bytes, r.chunkBytes)) + " for the size");
    r.sha256 = v.sha256Hex("sha256");
    r.chunkSha256 = v.strs("chunk_sha256", kMaxChunkCount, {kSha256HexChars, kSha256HexChars});
    if (!v.context().failed() && r.chunkSha256.size() != r.chunkCount)
        v.fail("chunk_sha256", "must hold chunk_count hashes");
    for (std::size_t i = 0; i < r.chunkSha256.size() && !v.context().failed(); ++i)
        if (!isSha256Hex(r.chunkSha256[i]))
            v.context().fail(
                v.fieldPath("chunk_sha256") + "[" + std::to_string(i) + "]", "expected 64 lowercase hex digits");
    return r;
}

uint64_t ResourceDescription::chunkLength(uint64_t index) const
{
    if (index >= chunkCount)
        return 0;
    return index + 1 == chunkCount ? bytes - index * chunkBytes : chunkBytes;
}

void FetchRequest::write(MapWriter& w) const
{
    w.str("project", project).str("resource", resource).u64("index", index);
}

FetchRequest FetchRequest::read(MapView v)
{
    FetchRequest r;
    r.project = v.projectName("project");
    r.resource = v.str("resource", {kMaxResourceNameChars});
    r.index = v.u64("index", 0, kMaxChunkCount - 1);
    return r;
}

void FetchReply::write(MapWriter& w) const
{
    w.str("resource", resource).u64("index", index).bin("data", data);
}

FetchReply FetchReply::read(MapView v)
{
    FetchReply r;
    r.resource = v.str("resource", {kMaxResourceNameChars});
    r.index = v.u64("index", 0, kMaxChunkCount - 1);
    r.data = v.bin("data", kMaxChunkBytes, 1);
    return r;
}

void SwarmPeersRequest::write(MapWriter& w) const
{
    w.str("project", project).str("info_hash", infoHash).u64("port", port).boolean("seeding", seeding);
}

SwarmPeersRequest SwarmPeersRequest::read(MapView v)
{
    SwarmPeersRequest r;
    r.project = v.projectName("project");
    r.infoHash = v.str("info_hash", {40, 40});
    if (!v.context().failed() && !isInfoHashHex(r.infoHash))
        v.fail("info_hash", "expected 40 lowercase hex digits");
    r.port = v.u64("port", 0, 65535);
    r.seeding = v.boolean("seeding");
    return r;
}

void SwarmPeer::write(MapWriter& w) const
{
    w.str("host", host).u64("port", port).boolean("seeding", seeding);
}

SwarmPeer SwarmPeer::read(MapView v)
{
    SwarmPeer p;
    p.host = v.str("host", {kMaxPeerHostChars, 0});
    p.port = v.u64("port", 1, 65535);
    p.seeding = v.boolean("seeding");
    return p;
}

void SwarmPeersReply::write(MapWriter& w) const
{
    w.array("peers", arrayOf(peers));
}

SwarmPeersReply SwarmPeersReply::read(MapView v)
{
    SwarmPeersReply r;
    r.peers = readAll<SwarmPeer>(v, "peers", kMaxSwarmPeers);
    return r;
}

} // namespace crowdtrain::net
