#include "net/volunteer/state_swarm.h"

#include "core/file_io.h"
#include "net/transfer/download.h"
#include "net/transport/client.h"

namespace crowdtrain::volunteer {

StateSwarm::StateSwarm(Session& session, const ProjectFolder& folder, Reporter& reporter, StateSwarmOptions options)
    : m_session(session)
    , m_folder(folder)
    , m_reporter(reporter)
    , m_options(std::move(options))
{ }

StateSwarm::~StateSwarm()
{
    if (m_seeded && m_swarm)
        m_swarm->remove(m_seeded->torrent.infoHash); // the file stays for a restart to replace
}

std::vector<swarm::PeerEndpoint> StateSwarm::askPeers(const std::string& infoHash, bool seeding, std::string* error)
{
    const uint16_t port = m_swarm ? m_swarm->listenPort() : 0;
    auto reply = m_session.call<net::SwarmPeersReply>(
        net::SwarmPeersRequest{m_session.project(), infoHash, port, seeding}, m_session.controlTimeoutMs());
    std::vector<swarm::PeerEndpoint> peers;
    if (!reply) {
        if (error)
            *error = reply.error().message;
        return peers;
    }
    const std::string hubHost = net::endpointHost(m_session.endpoint()).value_or(std::string());
    for (const net::SwarmPeer& peer : reply->peers)
        if (auto address = swarm::dialableAddress(peer.host.empty() ? hubHost : peer.host))
            peers.push_back({*address, uint16_t(peer.port)});
    return peers;
}

std::optional<std::string> StateSwarm::download(
    const net::JoinReply& join, uint64_t heldVersion, const std::atomic<bool>& stop)
{
    if (!join.stateTorrent)
        return std::nullopt;
    if (!m_swarm && m_options.session)
        m_swarm = m_options.session();
    if (!m_swarm) {
        m_reporter.log("the hub seeds the state in its swarm, but this volunteer has no swarm session");
        return std::nullopt;
    }
    if (m_seeded && m_seeded->version != join.version)
        retire();
    const std::filesystem::path dir = m_folder.dir() / "swarm";
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    const std::filesystem::path torrentFile = dir / ("." + join.stateResource + ".torrent");
    std::vector<std::filesystem::path> stale; // other versions' files, left by an earlier run
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec))
        if (entry.path() != torrentFile && entry.path().filename() != join.stateResource)
            stale.push_back(entry.path());
    for (const std::filesystem::path& path : stale)
        std::filesystem::remove(path, ec);
    auto source = m_session.resources();
    if (!source)
        return std::nullopt;
    net::DownloadOptions options;
    options.attemptsPerChunk = 2;
    options.cancel = &stop;
    if (auto fetched = net::Download(*source, join.stateTorrent->resource, torrentFile, options).run(); !fetched) {
        m_reporter.log("cannot fetch the state's torrent (%s); downloading in chunks", fetched.error().message.c_str());
        return std::nullopt;
    }
    auto torrent
        = swarm::loadListedTorrent(torrentFile, join.stateTorrent->infoHash, join.stateResource, join.stateBytes);
    if (!torrent) {
        m_reporter.log("%s; downloading in chunks", torrent.error().message.c_str());
        return std::nullopt;
    }

    swarm::FetchHooks hooks;
    hooks.askPeers = [&](std::string* error) { return askPeers(torrent->infoHash, false, error); };
    hooks.eachPoll = [&]() -> std::optional<std::string> {
        (void)m_session.keepAlive(heldVersion);
        return std::nullopt;
    };
    hooks.cancel = &stop;
    hooks.fallbackSeconds = m_options.fallbackSeconds;
    const swarm::SwarmDownload fetched = swarm::fetch(*m_swarm, *torrent, dir, join.stateSha256, hooks);
    m_received.fromPeers += fetched.sources.fromPeers;
    m_received.fromHub += fetched.sources.fromHub;
    if (fetched.verdict != swarm::SwarmDownload::Done) {
        if (fetched.verdict == swarm::SwarmDownload::Fallback)
            m_reporter.log("the state from the swarm: %s; downloading in chunks", fetched.why.c_str());
        return std::nullopt;
    }
    const std::filesystem::path file = dir / torrent->fileName;
    auto bytes = core::readFile(file);
    if (!bytes) {
        m_reporter.log(
            "cannot read the state from the swarm (%s); downloading in chunks", bytes.error().message.c_str());
        return std::nullopt;
    }
    m_reporter.log("version %llu: the state from the swarm, %llu bytes from peers and %llu from the hub",
        static_cast<unsigned long long>(join.version), static_cast<unsigned long long>(fetched.sources.fromPeers),
        static_cast<unsigned long long>(fetched.sources.fromHub));
    m_seeded = Seeded{join.version, *torrent, file, torrentFile};
    if (!m_options.seeding || m_options.seeding())
        seedHeld();
    return std::move(*bytes);
}

bool StateSwarm::seedHeld()
{
    if (Status seeded = m_swarm->seed(m_seeded->torrent, m_seeded->file.parent_path()); !seeded) {
        m_reporter.log("cannot seed the state: %s", seeded.error().message.c_str());
        return false;
    }
    (void)askPeers(m_seeded->torrent.infoHash, true, nullptr); // the hub lists us to the next ones
    return true;
}

void StateSwarm::holding(uint64_t version)
{
    if (!m_seeded)
        return;
    if (m_seeded->version != version) {
        retire();
        return;
    }
    if (!m_swarm)
        return;
    const bool allowed = !m_options.seeding || m_options.seeding();
    const bool seeding = m_swarm->has(m_seeded->torrent.infoHash);
    if (!allowed && seeding) {
        m_swarm->remove(m_seeded->torrent.infoHash);
        m_reporter.log("version %llu: stopped seeding the state (seeding is not allowed now)",
            static_cast<unsigned long long>(version));
    } else if (allowed && !seeding && seedHeld()) {
        m_reporter.log("version %llu: seeding the state again", static_cast<unsigned long long>(version));
    }
}

void StateSwarm::retire()
{
    if (m_swarm)
        m_swarm->remove(m_seeded->torrent.infoHash);
    std::error_code ec;
    std::filesystem::remove(m_seeded->file, ec);
    std::filesystem::remove(m_seeded->torrentFile, ec);
    m_seeded.reset();
}

} // namespace crowdtrain::volunteer
