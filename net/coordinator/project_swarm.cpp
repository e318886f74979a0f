#include "net/coordinator/project_swarm.h"

#include "core/file_io.h"
#include "net/wire/error_codes.h"
#include "net/wire/limits.h"

#include <algorithm>
#include <cstdio>
#include <vector>

namespace crowdtrain::coordinator {

namespace {

std::filesystem::path cachedTorrentPath(const std::filesystem::path& file)
{
    return file.parent_path() / ("." + file.filename().string() + ".torrent");
}

// The torrent kept beside `file`, when it is one for a file of this name
// and size; else a new one, hashed now and kept.
Result<swarm::TorrentFile> torrentFor(const std::filesystem::path& file, uint64_t bytes)
{
    const std::filesystem::path cached = cachedTorrentPath(file);
    if (auto saved = core::readFile(cached, 64 << 20))
        if (auto torrent = swarm::readTorrent(*saved);
            torrent && torrent->fileName == file.filename().string() && torrent->fileBytes == bytes)
            return torrent;
    auto torrent = swarm::makeTorrent(file);
    if (!torrent)
        return torrent.error();
    if (Status s = core::writeFileAtomic(cached, torrent->bytes); !s)
        std::fprintf(stderr, "cannot keep the torrent of %s (it will be hashed again at the next start): %s\n",
            file.c_str(), s.error().message.c_str());
    return torrent;
}

} // namespace

Status cacheTorrent(const std::filesystem::path& file)
{
    std::error_code ec;
    const uint64_t bytes = std::filesystem::file_size(file, ec);
    if (ec)
        return Error::make(net::errc::kIoError, "cannot read " + file.string() + ": " + ec.message());
    if (bytes < kTorrentMinBytes)
        return Status::success();
    auto torrent = torrentFor(file, bytes);
    return torrent ? Status::success() : Status(torrent.error());
}

ProjectSwarm::ProjectSwarm(swarm::SwarmSession* session, net::ResourceTable& resources)
    : m_session(session)
    , m_resources(resources)
{ }

Status ProjectSwarm::publish(const std::string& resource, const std::filesystem::path& file)
{
    if (!m_session || m_seeded.count(resource))
        return Status::success();
    std::error_code ec;
    const uint64_t bytes = std::filesystem::file_size(file, ec);
    if (ec)
        return Error::make(net::errc::kIoError, "cannot read " + file.string() + ": " + ec.message());
    if (bytes < kTorrentMinBytes)
        return Status::success();
    auto torrent = torrentFor(file, bytes);
    if (!torrent)
        return torrent.error();
    const std::string torrentResource = std::string(kTorrentResourcePrefix) + resource;
    if (!m_resources.contains(torrentResource))
        if (Status s = m_resources.addBlob(torrentResource, torrent->bytes); !s)
            return s;
    if (Status s = m_session->seed(*torrent, file.parent_path()); !s)
        return s;
    Seeded seeded;
    seeded.ref = {torrent->infoHash, torrent->infoHashV2, torrent->magnet, torrentResource};
    seeded.torrent = std::move(*torrent);
    m_byInfoHash[seeded.torrent.infoHash] = resource;
    m_seeded.emplace(resource, std::move(seeded));
    return Status::success();
}

void ProjectSwarm::withdraw(const std::string& resource)
{
    auto it = m_seeded.find(resource);
    if (it == m_seeded.end())
        return;
    m_session->remove(it->second.torrent.infoHash);
    m_resources.remove(it->second.ref.resource);
    m_byInfoHash.erase(it->second.torrent.infoHash);
    m_seeded.erase(it);
}

std::vector<std::string> ProjectSwarm::published() const
{
    std::vector<std::string> resources;
    for (const auto& [resource, seeded] : m_seeded)
        resources.push_back(resource);
    return resources;
}

std::optional<net::TorrentRef> ProjectSwarm::torrentOf(const std::string& resource) const
{
    auto it = m_seeded.find(resource);
    if (it == m_seeded.end())
        return std::nullopt;
    return it->second.ref;
}

std::optional<std::string> ProjectSwarm::resourceOf(const std::string& infoHash) const
{
    auto it = m_byInfoHash.find(infoHash);
    if (it == m_byInfoHash.end())
        return std::nullopt;
    return it->second;
}

std::size_t ProjectSwarm::downloadersAsking(const Seeded& seeded, int64_t nowMs)
{
    return std::size_t(std::count_if(seeded.peers.begin(), seeded.peers.end(),
        [&](const auto& entry) { return !entry.second.seeding && nowMs - entry.second.seenMs < kAskedRecentlyMs; }));
}

Result<net::SwarmPeersReply> ProjectSwarm::peers(
    const std::string& key, const net::SwarmPeersRequest& request, const std::string& address, int64_t nowMs)
{
    auto found = m_byInfoHash.find(request.infoHash);
    if (found == m_byInfoHash.end())
        return Error::make(net::errc::kNotFound, "no torrent " + request.infoHash + " here");
    Seeded& seeded = m_seeded.at(found->second);
    std::erase_if(seeded.peers, [&](const auto& entry) { return nowMs - entry.second.seenMs > kPeerLifetimeMs; });
    if (request.port > 0 && swarm::isIpAddress(address)
        && (seeded.peers.count(key) || seeded.peers.size() < kMaxPeersPerTorrent))
        seeded.peers[key] = {address, uint16_t(request.port), request.seeding, nowMs};
    else
        seeded.peers.erase(key);

    // Many downloaders asking: pieces spread among them, not all from here.
    if (downloadersAsking(seeded, nowMs) >= kSuperSeedFrom && !seeded.superSeeding) {
        m_session->setSuperSeed(seeded.torrent.infoHash, true);
        seeded.superSeeding = true;
    }
    net::SwarmPeersReply reply;
    reply.peers.push_back({"", m_session->listenPort(), true});
    std::vector<const Peer*> others;
    for (const auto& [peerKey, peer] : seeded.peers)
        if (peerKey != key)
            others.push_back(&peer);
    std::sort(others.begin(), others.end(),
        [](const Peer* a, const Peer* b) { return a->seeding != b->seeding ? a->seeding : a->seenMs > b->seenMs; });
    for (const Peer* peer : others) {
        if (reply.peers.size() >= net::kMaxSwarmPeers)
            break;
        reply.peers.push_back({peer->address, peer->port, peer->seeding});
    }
    return reply;
}

void ProjectSwarm::tick(int64_t nowMs)
{
    for (auto& [resource, seeded] : m_seeded) {
        auto progress = m_session->progress(seeded.torrent.infoHash);
        if (!progress)
            continue;
        const bool superSeed = std::size_t(std::max(0, progress->peers - progress->seeds)) >= kSuperSeedFrom
            || downloadersAsking(seeded, nowMs) >= kSuperSeedFrom;
        if (superSeed != seeded.superSeeding) {
            m_session->setSuperSeed(seeded.torrent.infoHash, superSeed);
            seeded.superSeeding = superSeed;
        }
    }
}

} // namespace crowdtrain::coordinator
