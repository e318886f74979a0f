#include "net/coordinator/downloads.h"

#include "core/file_io.h"
#include "net/wire/error_codes.h"
#include "net/wire/limits.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <set>
#include <string_view>

namespace crowdtrain::coordinator {
namespace {

std::string updateResourceName(int64_t version)
{
    return "update-v" + std::to_string(version);
}

constexpr std::string_view kCheckpointPrefix = "checkpoint/";
constexpr std::string_view kTokenizerPrefix = "tokenizer/";

} // namespace

std::string stateResourceName(int64_t version)
{
    return "state-v" + std::to_string(version);
}

Downloads::Downloads(const Parts& parts)
    : m_parts(parts)
    , m_stateBytes(uint64_t(parts.parameters) * sizeof(float))
    , m_pieces(m_resources, parts.data, parts.spec.tokensPerPiece() * ProjectSpec::kMaxPiecesPerTask)
    , m_swarm(parts.swarm, m_resources)
{ }

Status Downloads::publishTokenizer()
{
    if (!m_parts.data.tokenizerDir)
        return Status::success();
    std::vector<std::filesystem::path> files;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(*m_parts.data.tokenizerDir, ec))
        if (entry.is_regular_file())
            files.push_back(entry.path());
    if (ec)
        return Error::make(net::errc::kIoError, m_parts.data.tokenizerDir->string() + ": " + ec.message());
    std::sort(files.begin(), files.end());
    if (files.size() > net::kMaxTokenizerFiles)
        return Error::make(net::errc::kBadSpec,
            m_parts.data.tokenizerDir->string() + ": more than " + std::to_string(net::kMaxTokenizerFiles) + " files");
    for (const auto& file : files) {
        const std::string name = std::string(kTokenizerPrefix) + file.filename().string();
        if (Status s = m_resources.addFile(name, file); !s)
            return s;
        auto description = m_resources.describe(name);
        if (!description)
            return description.error();
        m_tokenizerFiles.push_back(
            {file.filename().string(), description->bytes, description->sha256, name, std::nullopt});
    }
    return Status::success();
}

Status Downloads::publish()
{
    const int64_t version = m_parts.round.version();
    const std::string state = stateResourceName(version);
    if (!m_resources.contains(state))
        if (Status s = m_resources.addFile(state, m_parts.store.thetaFile(version)); !s)
            return s;
    if (m_publishedState && *m_publishedState != version)
        m_oldStates[*m_publishedState] = m_stateAskedMs[*m_publishedState];
    m_publishedState = version;
    m_parts.store.holdTheta(version); // served, so kept until retired
    if (version > 0 && (m_keptUpdates.empty() || m_keptUpdates.back().version != version)) {
        // Added by prepareVersion after a close; read from its file at a start.
        const std::string name = updateResourceName(version);
        if (!m_resources.contains(name))
            if (auto update = m_parts.store.readUpdate(version))
                if (Status s = m_resources.addBlob(name, std::move(*update)); !s)
                    return s;
        if (auto description = m_resources.describe(name))
            m_keptUpdates.push_back({version, m_parts.round.paramsSha(), description->bytes});
    }
    uint64_t keptBytes = 0;
    for (const KeptUpdate& kept : m_keptUpdates)
        keptBytes += kept.bytes;
    while (!m_keptUpdates.empty() && (keptBytes > m_stateBytes || m_keptUpdates.size() > kMaxKeptUpdates)) {
        keptBytes -= m_keptUpdates.front().bytes;
        m_resources.remove(updateResourceName(m_keptUpdates.front().version));
        m_keptUpdates.pop_front();
    }
    auto list = m_parts.checkpoints.list();
    if (!list)
        return list.error();
    std::set<std::string> kept;
    if (m_swarm.enabled() && m_stateBytes >= kTorrentMinBytes) {
        // The state is served in chunks whether or not the swarm seeds it.
        if (Status s = seedState(); !s)
            std::fprintf(stderr, "%s: %s is not seeded: %s\n", m_parts.spec.name.c_str(), state.c_str(),
                s.error().message.c_str());
        else
            kept.insert(state);
        for (const auto& [old, askedMs] : m_oldStates)
            kept.insert(stateResourceName(old));
    }
    for (const CheckpointInfo& checkpoint : *list)
        for (const CheckpointFile& file : checkpoint.files) {
            const std::string name = checkpointResourceName(checkpoint.round, file.name);
            if (!m_resources.contains(name))
                if (Status s = m_resources.addFile(name, checkpoint.dir / file.name); !s)
                    return s;
            // A file the swarm cannot seed is still served in chunks.
            if (Status s = m_swarm.publish(name, checkpoint.dir / file.name); !s)
                std::fprintf(stderr, "%s: %s is not seeded: %s\n", m_parts.spec.name.c_str(), name.c_str(),
                    s.error().message.c_str());
            kept.insert(name);
        }
    for (const std::string& seeded : m_swarm.published())
        if (!kept.count(seeded))
            m_swarm.withdraw(seeded);
    return Status::success();
}

Status Downloads::seedState()
{
    const int64_t version = m_parts.round.version();
    return m_swarm.publish(stateResourceName(version), m_parts.store.thetaFile(version));
}

Status Downloads::prepareVersion(int64_t version, std::string update)
{
    if (!update.empty())
        if (Status s = m_resources.addBlob(updateResourceName(version), std::move(update));
            !s && s.error().code != net::errc::kExists)
            return s;
    const std::filesystem::path file = m_parts.store.thetaFile(version);
    if (Status s = m_resources.addFile(stateResourceName(version), file); !s && s.error().code != net::errc::kExists)
        return s;
    return m_swarm.enabled() ? cacheTorrent(file) : Status::success();
}

void Downloads::forgetVersion(int64_t version)
{
    m_resources.remove(stateResourceName(version));
    m_resources.remove(updateResourceName(version));
}

Status Downloads::prepareCheckpoint(const CheckpointInfo& checkpoint)
{
    for (const CheckpointFile& file : checkpoint.files) {
        const std::string name = checkpointResourceName(checkpoint.round, file.name);
        if (Status s = m_resources.addFile(name, checkpoint.dir / file.name);
            !s && s.error().code != net::errc::kExists)
            return s;
        if (m_swarm.enabled())
            if (Status s = cacheTorrent(checkpoint.dir / file.name); !s)
                return s;
    }
    return Status::success();
}

void Downloads::tick(int64_t nowMs)
{
    if (nowMs - m_swarmTickMs < kSwarmTickPeriodMs)
        return;
    m_swarmTickMs = nowMs;
    retireOldStates(nowMs);
    m_swarm.tick(nowMs);
}

void Downloads::noteDownload(const std::string& name, int64_t nowMs)
{
    std::string_view resource = name;
    if (resource.starts_with(kTorrentResourcePrefix))
        resource.remove_prefix(kTorrentResourcePrefix.size());
    constexpr std::string_view kState = "state-v";
    if (!resource.starts_with(kState))
        return;
    int64_t version = 0;
    const char* end = resource.data() + resource.size();
    if (auto [at, error] = std::from_chars(resource.data() + kState.size(), end, version);
        error != std::errc() || at != end)
        return;
    m_stateAskedMs[version] = nowMs;
    if (auto old = m_oldStates.find(version); old != m_oldStates.end())
        old->second = nowMs;
}

// Withdraws the older states nobody asked for in the grace, and all but the
// newest kMaxOldStates. The grace is kOldStateGraceMs, or the longest a
// volunteer waits for one chunk when longer: a chunk's fetches are that far
// apart on the slowest link the session allows.
void Downloads::retireOldStates(int64_t nowMs)
{
    const int64_t graceMs = std::max(kOldStateGraceMs, m_parts.chunkTimeoutMs);
    std::vector<int64_t> gone;
    std::size_t newer = 0;
    for (auto it = m_oldStates.rbegin(); it != m_oldStates.rend(); ++it) {
        const bool asked = it->second > 0 && nowMs - it->second < graceMs;
        if (asked && newer < kMaxOldStates)
            ++newer;
        else
            gone.push_back(it->first);
    }
    for (const int64_t version : gone) {
        const std::string name = stateResourceName(version);
        m_resources.remove(name);
        m_swarm.withdraw(name);
        m_parts.store.releaseTheta(version);
        m_oldStates.erase(version);
    }
    // Asks for states no longer served are forgotten.
    std::erase_if(m_stateAskedMs,
        [&](const auto& entry) { return entry.first != m_parts.round.version() && !m_oldStates.count(entry.first); });
}

Status Downloads::checkpointAccess(const std::string& key)
{
    switch (m_parts.spec.checkpointAccess) {
    case CheckpointAccess::Everyone:
        return Status::success();
    case CheckpointAccess::Participants: {
        auto totals = m_parts.store.ledger().volunteerTotals(key);
        if (totals && totals->accepted > 0)
            return Status::success();
        return Error::make(net::errc::kForbidden,
            "project " + m_parts.spec.name
                + " shares its checkpoints with participants only: train one accepted task first");
    }
    case CheckpointAccess::Nobody:
        break;
    }
    return Error::make(
        net::errc::kForbidden, "project " + m_parts.spec.name + " does not share its checkpoints until its release");
}

Status Downloads::prepare(const std::string& key, const std::string& name)
{
    // A checkpoint file, or its .torrent: the project's terms decide.
    if (name.starts_with(kCheckpointPrefix)
        || (name.starts_with(kTorrentResourcePrefix)
            && name.substr(kTorrentResourcePrefix.size()).starts_with(kCheckpointPrefix)))
        return checkpointAccess(key);
    if (DataPieces::handles(name))
        return m_pieces.prepare(name, [&](uint64_t taskId) -> const std::vector<Piece>* {
            const OpenTask* task = m_parts.tasks.find(taskId, key);
            return task ? &task->lease.pieces : nullptr;
        });
    return Status::success();
}

Result<net::GetUpdateReply> Downloads::getUpdate(const net::GetUpdateRequest& request) const
{
    const int64_t version = m_parts.round.version();
    const auto kept = std::find_if(m_keptUpdates.begin(), m_keptUpdates.end(),
        [&](const KeptUpdate& u) { return u.version == int64_t(request.fromVersion) + 1; });
    const std::string name = kept == m_keptUpdates.end() ? std::string() : updateResourceName(kept->version);
    if (name.empty() || !m_resources.contains(name))
        return Error::make(net::errc::kNotFound,
            "no update from version " + std::to_string(request.fromVersion) + " (the project is at version "
                + std::to_string(version) + "): download " + stateResourceName(version));
    auto description = m_resources.describe(name);
    if (!description)
        return description.error();
    const std::string codec(m_parts.spec.codec == diloco::Codec::Sparse ? net::kCodecSparse : net::kCodecInt8);
    return net::GetUpdateReply{request.fromVersion, uint64_t(kept->version), codec, uint64_t(m_parts.parameters), name,
        description->bytes, description->sha256, kept->stateSha256};
}

net::CheckpointInfo Downloads::withTorrents(net::CheckpointInfo checkpoint) const
{
    for (net::FileInfo& file : checkpoint.files)
        file.torrent = m_swarm.torrentOf(file.resource);
    return checkpoint;
}

net::CheckpointInfo Downloads::announced(net::CheckpointInfo checkpoint) const
{
    if (m_parts.spec.checkpointAccess != CheckpointAccess::Everyone)
        return checkpoint;
    return withTorrents(std::move(checkpoint));
}

Result<net::ListCheckpointsReply> Downloads::listCheckpoints(const std::optional<std::string>& key)
{
    auto reply = m_parts.queries.listCheckpoints();
    // The info-hash is what a BitTorrent peer names to be served the file:
    // only those who may have the file learn it.
    const bool torrents
        = m_parts.spec.checkpointAccess == CheckpointAccess::Everyone || (key && checkpointAccess(*key));
    if (reply && torrents)
        for (net::CheckpointInfo& checkpoint : reply->checkpoints)
            checkpoint = withTorrents(std::move(checkpoint));
    return reply;
}

Result<net::SwarmPeersReply> Downloads::swarmPeers(
    const std::string& key, const net::SwarmPeersRequest& request, const std::string& address, int64_t nowMs)
{
    const std::optional<std::string> resource = m_swarm.resourceOf(request.infoHash);
    if (!resource)
        return Error::make(
            net::errc::kNotFound, "project " + m_parts.spec.name + " seeds no torrent " + request.infoHash);
    if (Status allowed = prepare(key, *resource); !allowed)
        return allowed.error();
    if (!request.seeding)
        noteDownload(*resource, nowMs);
    return m_swarm.peers(key, request, address, nowMs);
}

} // namespace crowdtrain::coordinator
