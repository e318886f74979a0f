#include "net/daemon/checkpoint_swarm.h"

#include "core/file_io.h"
#include "core/thread_name.h"
#include "net/control/setting_keys.h"
#include "net/daemon/checkpoint_transfer.h"
#include "net/transfer/sha256.h"
#include "net/wire/error_codes.h"
#include "net/wire/messages.h"

#include <thread>

namespace crowdtrain::daemon {

namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kHubFile = ".hub";

std::filesystem::path torrentPathFor(const std::filesystem::path& file)
{
    return file.parent_path() / ("." + file.filename().string() + ".torrent");
}

} // namespace

CheckpointSwarm::CheckpointSwarm(HubDirectory& hubs, CheckpointSwarmOptions options)
    : m_hubs(hubs)
    , m_options(std::move(options))
{
    m_ticker = std::thread([this] {
        core::nameThisThread("swarm-ticker");
        std::unique_lock lock(m_tickMutex);
        while (true) {
            m_tickWake.wait_for(lock, std::chrono::seconds(2), [this] { return m_stopping || m_tickNow; });
            if (m_stopping)
                return;
            m_tickNow = false;
            lock.unlock();
            tick();
            lock.lock();
        }
    });
}

CheckpointSwarm::~CheckpointSwarm()
{
    stopTicking();
}

void CheckpointSwarm::stopTicking()
{
    {
        std::lock_guard lock(m_tickMutex);
        m_stopping = true;
    }
    m_tickWake.notify_all();
    if (m_ticker.joinable())
        m_ticker.join();
}

swarm::SwarmSession* CheckpointSwarm::sharedSession()
{
    std::lock_guard lock(m_mutex);
    return session();
}

swarm::SwarmSession* CheckpointSwarm::session()
{
    if (m_session)
        return m_session.get();
    swarm::SwarmSettings settings;
    settings.listenPort = m_options.listenPort ? m_options.listenPort() : 0;
    if (m_options.throttle) {
        settings.uploadBytesPerSecond = m_options.throttle->rate(limits::NetworkThrottle::Direction::Up);
        settings.downloadBytesPerSecond = m_options.throttle->rate(limits::NetworkThrottle::Direction::Down);
    }
    auto started = swarm::SwarmSession::start(settings);
    if (!started) {
        if (m_options.log)
            m_options.log("checkpoint sharing is off: " + started.error().message);
        return nullptr;
    }
    m_session = std::move(*started);
    if (m_options.log)
        m_options.log("checkpoint sharing (BitTorrent) listens on port " + std::to_string(m_session->listenPort()));
    wakeTicker(); // the view says so
    return m_session.get();
}

bool CheckpointSwarm::seedingAllowed() const
{
    if (m_options.capReached && m_options.capReached())
        return false;
    const std::string policy
        = m_options.seeding ? m_options.seeding() : std::string(control::setting::kSeedingWhileTraining);
    if (policy == control::setting::kSeedingAlways)
        return true;
    if (policy == control::setting::kSeedingNever)
        return false;
    return m_options.training && m_options.training();
}

void CheckpointSwarm::applyLimits(swarm::SwarmSession& session)
{
    if (!m_options.throttle)
        return;
    session.setRates(m_options.throttle->rate(limits::NetworkThrottle::Direction::Up),
        m_options.throttle->rate(limits::NetworkThrottle::Direction::Down));
}

void CheckpointSwarm::countTraffic(swarm::SwarmSession& session)
{
    // Each byte once, and from the same budget as the chunks and the
    // agent's requests. A total that went back (a torrent's counters start
    // again when it restarts) adds nothing rather than wrapping around.
    auto grown = [](uint64_t now, uint64_t counted) { return now > counted ? now - counted : 0; };
    const swarm::SwarmTotals totals = session.totals();
    if (m_options.throttle) {
        using Direction = limits::NetworkThrottle::Direction;
        m_options.throttle->charge(Direction::Up, grown(totals.uploaded, m_countedUp));
        m_options.throttle->charge(Direction::Down, grown(totals.downloaded, m_countedDown));
    }
    m_countedUp = totals.uploaded;
    m_countedDown = totals.downloaded;
}

std::vector<swarm::PeerEndpoint> CheckpointSwarm::askPeers(
    const HubLink& hub, const std::string& project, const std::string& infoHash, bool seeding, std::string* error)
{
    uint16_t port = 0;
    {
        std::lock_guard lock(m_mutex);
        port = m_session ? m_session->listenPort() : 0;
    }
    auto reply = m_hubs.call<net::SwarmPeersReply>(hub, net::SwarmPeersRequest{project, infoHash, port, seeding}, 5000);
    std::vector<swarm::PeerEndpoint> peers;
    if (!reply) {
        if (error)
            *error = reply.error().message;
        return peers;
    }
    for (const net::SwarmPeer& peer : reply->peers) {
        auto address = swarm::dialableAddress(peer.host.empty() ? hub.host : peer.host);
        if (address)
            peers.push_back({*address, uint16_t(peer.port)});
    }
    return peers;
}

SwarmDownload CheckpointSwarm::download(const HubLink& hub, const std::string& project, const net::FileInfo& file,
    const std::filesystem::path& target, const std::atomic<bool>* cancel,
    const std::function<void(uint64_t doneBytes, const SwarmSources&)>& progress)
{
    SwarmDownload result;
    auto fallback = [&](std::string why) {
        result.verdict = SwarmDownload::Fallback;
        result.why = std::move(why);
        return result;
    };
    if (!file.torrent)
        return fallback("the hub offers no torrent of " + file.name);
    if (m_options.capReached && m_options.capReached())
        return fallback("the month's data cap is reached");

    // The .torrent: a small verified resource of the hub's.
    auto client = m_hubs.connect(hub);
    if (!client)
        return fallback(client.error().message);
    const std::filesystem::path torrentFile = torrentPathFor(target);
    auto fetched = fetchResource(**client, file.torrent->resource, torrentFile,
        FetchOptions{project, 10000, m_options.throttle.get(), cancel, {}});
    if (!fetched) {
        if (fetched.error().code == net::errc::kCancelled) {
            result.verdict = SwarmDownload::Cancelled;
            return result;
        }
        return fallback("cannot fetch the torrent: " + fetched.error().message);
    }
    auto torrent = swarm::loadListedTorrent(torrentFile, file.torrent->infoHash, file.name, file.bytes);
    if (!torrent)
        return fallback(torrent.error().message);
    swarm::SwarmSession* swarmSession = nullptr;
    {
        std::lock_guard lock(m_mutex);
        swarmSession = session();
        if (!swarmSession)
            return fallback("checkpoint sharing cannot listen");
        applyLimits(*swarmSession);
    }
    swarm::FetchHooks hooks;
    hooks.askPeers = [&](std::string* error) { return askPeers(hub, project, torrent->infoHash, false, error); };
    hooks.eachPoll = [&]() -> std::optional<std::string> {
        {
            std::lock_guard lock(m_mutex);
            countTraffic(*swarmSession);
            applyLimits(*swarmSession);
        }
        if (m_options.capReached && m_options.capReached())
            return "the month's data cap is reached";
        return std::nullopt;
    };
    hooks.progress = progress;
    hooks.cancel = cancel;
    hooks.fallbackSeconds = m_options.fallbackSeconds;
    // Seeded again from its final folder afterwards (adopt).
    return swarm::fetch(*swarmSession, *torrent, target.parent_path(), file.sha256, hooks);
}

void CheckpointSwarm::adopt(
    const std::string& hubLabel, const std::string& project, const std::filesystem::path& folder)
{
    std::error_code ec;
    bool any = false;
    for (const auto& entry : std::filesystem::directory_iterator(folder, ec)) {
        const std::string name = entry.path().filename().string();
        if (!name.starts_with(".") || !name.ends_with(".torrent"))
            continue;
        auto bytes = core::readFile(entry.path(), 64 << 20);
        auto torrent = bytes ? swarm::readTorrent(*bytes) : Result<swarm::TorrentFile>(bytes.error());
        if (!torrent || std::filesystem::file_size(folder / torrent->fileName, ec) != torrent->fileBytes || ec)
            continue;
        std::lock_guard lock(m_mutex);
        Seeded& seeded = m_seeded[torrent->infoHash];
        seeded.hubLabel = hubLabel;
        seeded.project = project;
        seeded.folder = folder;
        seeded.torrent = std::move(*torrent);
        any = true;
    }
    if (!any)
        return;
    if (!std::filesystem::exists(folder / kHubFile, ec))
        (void)core::writeFileAtomic(folder / kHubFile, hubLabel + "\n");
    // Seeded now, so the peers that were fetching it keep a source; the
    // hub hears of it from the ticker's thread (that call may wait seconds).
    {
        std::lock_guard lock(m_mutex);
        activateLocked();
        publishLocked();
    }
    wakeTicker();
}

void CheckpointSwarm::wakeTicker()
{
    {
        std::lock_guard lock(m_tickMutex);
        m_tickNow = true;
    }
    m_tickWake.notify_all();
}

void CheckpointSwarm::adoptAll(const std::filesystem::path& root)
{
    std::error_code ec;
    for (const auto& project : std::filesystem::directory_iterator(root, ec)) {
        if (!project.is_directory())
            continue;
        std::error_code inner;
        for (const auto& folder : std::filesystem::directory_iterator(project.path(), inner)) {
            if (!folder.is_directory() || !folder.path().filename().string().starts_with("round-"))
                continue;
            auto hub = core::readFile(folder.path() / kHubFile, 4096);
            if (!hub)
                continue;
            std::string label = *hub;
            while (!label.empty() && (label.back() == '\n' || label.back() == '\r'))
                label.pop_back();
            adopt(label, project.path().filename().string(), folder.path());
        }
    }
}

void CheckpointSwarm::forget(const std::filesystem::path& folder)
{
    std::lock_guard lock(m_mutex);
    for (auto it = m_seeded.begin(); it != m_seeded.end();) {
        if (it->second.folder != folder) {
            ++it;
            continue;
        }
        if (it->second.active && m_session)
            m_session->remove(it->first);
        it = m_seeded.erase(it);
    }
    publishLocked();
}

void CheckpointSwarm::activateLocked()
{
    const bool allowed = seedingAllowed();
    for (auto& [infoHash, seeded] : m_seeded) {
        if (allowed && !seeded.active) {
            swarm::SwarmSession* s = session();
            if (!s || !s->seed(seeded.torrent, seeded.folder))
                continue;
            seeded.active = true;
            seeded.announcedAt = {};
        } else if (!allowed && seeded.active) {
            m_session->remove(infoHash);
            seeded.active = false;
        }
    }
}

void CheckpointSwarm::tick()
{
    struct Announce {
        std::string hubLabel, project, infoHash;
    };
    std::vector<Announce> announce;
    {
        std::lock_guard lock(m_mutex);
        activateLocked();
        const auto now = Clock::now();
        for (auto& [infoHash, seeded] : m_seeded) {
            if (seeded.active && now - seeded.announcedAt >= std::chrono::seconds(m_options.announceSeconds)) {
                seeded.announcedAt = now;
                announce.push_back({seeded.hubLabel, seeded.project, infoHash});
            }
        }
        if (m_session) {
            applyLimits(*m_session);
            countTraffic(*m_session);
        }
        publishLocked();
    }
    // The hubs are asked outside the lock: each call may wait seconds.
    for (const Announce& a : announce) {
        auto hub = m_options.resolve ? m_options.resolve(a.hubLabel) : parseHubLink(a.hubLabel);
        if (hub)
            (void)askPeers(*hub, a.project, a.infoHash, true, nullptr);
    }
}

void CheckpointSwarm::publishLocked()
{
    View view;
    view.listening = m_session != nullptr;
    view.port = int64_t(m_session ? m_session->listenPort() : 0);
    view.seeding = seedingAllowed();
    view.totals = m_session ? m_session->totals() : swarm::SwarmTotals{};
    for (const auto& [infoHash, seeded] : m_seeded) {
        TorrentView t{seeded.project, seeded.torrent.fileName, infoHash, seeded.folder, seeded.active};
        if (auto progress = seeded.active && m_session ? m_session->progress(infoHash) : std::nullopt) {
            t.peers = progress->peers;
            t.uploadedBytes = progress->uploadedPayload;
        }
        view.torrents.push_back(std::move(t));
    }
    std::lock_guard lock(m_viewMutex);
    m_view = std::move(view);
}

control::Value CheckpointSwarm::folderStatus(const std::filesystem::path& folder) const
{
    std::lock_guard lock(m_viewMutex);
    control::Value v;
    for (const TorrentView& t : m_view.torrents) {
        if (t.folder != folder)
            continue;
        v.set("seeding", t.active);
        v.set("seed_peers", t.peers);
        v.set("uploaded_bytes", t.uploadedBytes);
    }
    return v;
}

control::Value CheckpointSwarm::status() const
{
    std::lock_guard lock(m_viewMutex);
    control::Value v = control::Value::map();
    v.set("listening", m_view.listening);
    v.set("port", m_view.port);
    v.set("seeding", m_view.seeding);
    v.set("uploaded_bytes", m_view.totals.uploaded).set("downloaded_bytes", m_view.totals.downloaded);
    control::Value torrents = control::Value::array();
    for (const TorrentView& t : m_view.torrents) {
        control::Value e = control::Value::map();
        e.set("project", t.project).set("file", t.file);
        e.set("folder", t.folder.string()).set("info_hash", t.infoHash).set("active", t.active);
        e.set("peers", t.peers).set("uploaded_bytes", t.uploadedBytes);
        torrents.push(e);
    }
    v.set("torrents", torrents);
    return v;
}

} // namespace crowdtrain::daemon
