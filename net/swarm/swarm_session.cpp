#include "net/swarm/swarm_session.h"

#include "core/hex.h"
#include "core/thread_name.h"
#include "net/wire/error_codes.h"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/udp.hpp>
#include <libtorrent/add_torrent_params.hpp>
#include <libtorrent/address.hpp>
#include <libtorrent/alert_types.hpp>
#include <libtorrent/extensions/smart_ban.hpp>
#include <libtorrent/extensions/ut_metadata.hpp>
#include <libtorrent/extensions/ut_pex.hpp>
#include <libtorrent/ip_filter.hpp>
#include <libtorrent/peer_info.hpp>
#include <libtorrent/session.hpp>
#include <libtorrent/session_params.hpp>
#include <libtorrent/settings_pack.hpp>
#include <libtorrent/torrent_handle.hpp>
#include <libtorrent/torrent_info.hpp>
#include <libtorrent/torrent_status.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>

namespace crowdtrain::swarm {

namespace {

// CROWDTRAIN_SWARM_TRACE=1: every libtorrent alert on stderr, connection
// and peer logs included (for finding out why a swarm does not move).
bool traceRequested()
{
    const char* value = std::getenv("CROWDTRAIN_SWARM_TRACE");
    return value && *value && std::string_view(value) != "0";
}

int rateSetting(uint64_t bytesPerSecond)
{
    return int(std::min<uint64_t>(bytesPerSecond, uint64_t(INT_MAX)));
}

std::string keyOf(const lt::torrent_handle& handle)
{
    const lt::sha1_hash v1 = handle.info_hashes().v1;
    return core::hexOf(v1.data(), v1.size());
}

std::string listenInterface(const SwarmSettings& settings)
{
    const std::string& address = settings.listenAddress;
    const bool v6 = address.find(':') != std::string::npos && address.front() != '[';
    return (v6 ? "[" + address + "]" : address) + ":" + std::to_string(settings.listenPort);
}

lt::settings_pack packFor(const SwarmSettings& settings)
{
    lt::settings_pack pack;
    pack.set_str(lt::settings_pack::listen_interfaces, listenInterface(settings));
    pack.set_str(lt::settings_pack::user_agent, "crowdtrain");
    pack.set_bool(lt::settings_pack::enable_dht, false);
    pack.set_bool(lt::settings_pack::enable_lsd, false);
    pack.set_bool(lt::settings_pack::enable_upnp, false);
    pack.set_bool(lt::settings_pack::enable_natpmp, false);
    // Volunteers behind one NAT (and every test on loopback) share an address.
    pack.set_bool(lt::settings_pack::allow_multiple_connections_per_ip, true);
    pack.set_int(lt::settings_pack::connections_limit, std::max(settings.maxConnections, 2));
    if (settings.unchokeSlots != 0)
        pack.set_int(lt::settings_pack::unchoke_slots_limit, settings.unchokeSlots);
    // Two disk threads and one hasher (libtorrent's default is ten): a
    // home machine's disk is not the bottleneck of a capped link.
    pack.set_int(lt::settings_pack::aio_threads, 2);
    pack.set_int(lt::settings_pack::hashing_threads, 1);
    pack.set_int(lt::settings_pack::upload_rate_limit, rateSetting(settings.uploadBytesPerSecond));
    pack.set_int(lt::settings_pack::download_rate_limit, rateSetting(settings.downloadBytesPerSecond));
    lt::alert_category_t alerts = lt::alert_category::error | lt::alert_category::status | lt::alert_category::peer
        | lt::alert_category::storage; // cache_flushed_alert, for flush()
    if (traceRequested())
        alerts |= lt::alert_category::connect | lt::alert_category::peer_log | lt::alert_category::torrent_log;
    pack.set_int(lt::settings_pack::alert_mask, int(alerts));
    return pack;
}

// A port free for both TCP and UDP on `address`, for a session asked for
// port 0. libtorrent given port 0 binds each interface of a wildcard address
// on a port of its own, and the one listenPort() reports (and the hub
// passes on) may be loopback's, which no other machine reaches.
std::optional<uint16_t> freePort(const std::string& address)
{
    lt::error_code ec;
    const lt::address ip = lt::make_address(address, ec);
    if (ec)
        return std::nullopt;
    for (int attempt = 0; attempt < 20; ++attempt) {
        try {
            boost::asio::io_context io;
            boost::asio::ip::tcp::acceptor tcp(io, boost::asio::ip::tcp::endpoint(ip, 0));
            const uint16_t port = tcp.local_endpoint().port();
            boost::asio::ip::udp::socket udp(io);
            udp.open(ip.is_v4() ? boost::asio::ip::udp::v4() : boost::asio::ip::udp::v6(), ec);
            if (!ec)
                udp.bind(boost::asio::ip::udp::endpoint(ip, port), ec);
            if (!ec)
                return port;
        } catch (const std::exception&) {
            return std::nullopt;
        }
    }
    return std::nullopt;
}

// Every address in the global peer class, so the session's rate limits
// hold for loopback and LAN peers too.
lt::ip_filter everyPeerLimited()
{
    lt::ip_filter filter;
    const auto global = 1u << static_cast<std::uint32_t>(lt::session::global_peer_class_id);
    filter.add_rule(lt::make_address("0.0.0.0"), lt::make_address("255.255.255.255"), global);
    filter.add_rule(lt::make_address("::"), lt::make_address("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), global);
    return filter;
}

} // namespace

bool isIpAddress(const std::string& host)
{
    lt::error_code ec;
    lt::make_address(host, ec);
    return !ec;
}

struct SwarmSession::State {
    struct Entry {
        lt::torrent_handle handle;
        uint64_t hashFailures = 0;
        uint64_t bannedPeers = 0;
        uint64_t flushes = 0; // cache_flushed_alerts seen
        std::string error;
    };

    std::unique_ptr<lt::session> session;
    mutable std::mutex mutex;
    std::condition_variable flushed;
    std::map<std::string, Entry> torrents;
    uint64_t removedUploaded = 0;
    uint64_t removedDownloaded = 0;
    std::atomic<bool> stopping{false};
    bool trace = traceRequested();
    std::thread alertThread;

    // The entry of an alert's torrent; null when it was removed since (its
    // handle is then invalid, and libtorrent throws on asking it).
    Entry* find(const lt::torrent_handle& handle)
    {
        try {
            auto it = torrents.find(keyOf(handle));
            return it == torrents.end() ? nullptr : &it->second;
        } catch (const std::exception&) {
            return nullptr;
        }
    }

    void readAlerts()
    {
        std::vector<lt::alert*> alerts;
        while (!stopping.load()) {
            session->wait_for_alert(std::chrono::milliseconds(200));
            session->pop_alerts(&alerts);
            std::lock_guard lock(mutex);
            for (lt::alert* alert : alerts) {
                if (trace)
                    std::fprintf(stderr, "swarm: %s\n", alert->message().c_str());
                // alert_cast matches the exact type only, so each is asked for by name.
                if (const auto* failed = lt::alert_cast<lt::hash_failed_alert>(alert)) {
                    if (Entry* entry = find(failed->handle))
                        ++entry->hashFailures;
                } else if (const auto* ban = lt::alert_cast<lt::peer_ban_alert>(alert)) {
                    if (Entry* entry = find(ban->handle))
                        ++entry->bannedPeers;
                } else if (const auto* done = lt::alert_cast<lt::cache_flushed_alert>(alert)) {
                    if (Entry* entry = find(done->handle))
                        ++entry->flushes;
                    flushed.notify_all();
                } else if (const auto* error = lt::alert_cast<lt::torrent_error_alert>(alert)) {
                    if (Entry* entry = find(error->handle))
                        entry->error = error->error.message() + " (" + error->filename() + ")";
                }
            }
        }
    }
};

Result<std::unique_ptr<SwarmSession>> SwarmSession::start(const SwarmSettings& asked)
{
    if (!isIpAddress(asked.listenAddress))
        return Error::make(
            net::errc::kInvalidArgument, "listen address " + asked.listenAddress + " is not an IP address");
    if (asked.listenPort == 0) {
        // Another program may take the port between our probe and
        // libtorrent's bind: a few tries.
        for (int attempt = 0;; ++attempt) {
            SwarmSettings settings = asked;
            if (const auto port = freePort(asked.listenAddress))
                settings.listenPort = *port;
            auto started = startOn(settings);
            if (started || attempt == 4 || started.error().code != net::errc::kAddressInUse)
                return started;
        }
    }
    return startOn(asked);
}

Result<std::unique_ptr<SwarmSession>> SwarmSession::startOn(const SwarmSettings& settings)
{
    auto state = std::make_unique<State>();
    try {
        // libtorrent's default plugins, named: metadata exchange, smart-ban
        // (finds the peer that sent a bad block), and peer exchange.
        lt::session_params params(packFor(settings), {});
        state->session = std::make_unique<lt::session>(std::move(params));
        state->session->add_extension(&lt::create_ut_metadata_plugin);
        state->session->add_extension(&lt::create_smart_ban_plugin);
        if (settings.peerExchange)
            state->session->add_extension(&lt::create_ut_pex_plugin);
        state->session->set_peer_class_filter(everyPeerLimited());
    } catch (const std::exception& e) {
        return Error::make(net::errc::kIoError, std::string("cannot start the BitTorrent session: ") + e.what());
    }
    // Wait for the TCP listen socket's verdict.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    std::vector<lt::alert*> alerts;
    std::optional<Error> failure;
    while (!state->session->is_listening() && !failure && std::chrono::steady_clock::now() < deadline) {
        state->session->wait_for_alert(std::chrono::milliseconds(100));
        state->session->pop_alerts(&alerts);
        for (lt::alert* alert : alerts)
            if (const auto* failed = lt::alert_cast<lt::listen_failed_alert>(alert);
                failed && failed->socket_type == lt::socket_type_t::tcp)
                failure = Error::make(failed->error == boost::system::errc::address_in_use ? net::errc::kAddressInUse
                                                                                           : net::errc::kIoError,
                    "cannot listen on " + listenInterface(settings) + ": " + failed->error.message());
    }
    if (failure)
        return *failure;
    if (!state->session->is_listening())
        return Error::make(
            net::errc::kIoError, "the BitTorrent session did not listen on " + listenInterface(settings));
    State* raw = state.get();
    state->alertThread = std::thread([raw] {
        core::nameThisThread("swarm-alerts");
        raw->readAlerts();
    });
    return std::unique_ptr<SwarmSession>(new SwarmSession(std::move(state)));
}

SwarmSession::SwarmSession(std::unique_ptr<State> state)
    : m_state(std::move(state))
{ }

SwarmSession::~SwarmSession()
{
    m_state->stopping = true;
    if (m_state->alertThread.joinable())
        m_state->alertThread.join();
    // lt::session's destructor closes connections and waits for its threads.
    m_state->session.reset();
}

uint16_t SwarmSession::listenPort() const
{
    return m_state->session->listen_port();
}

void SwarmSession::setRates(uint64_t uploadBytesPerSecond, uint64_t downloadBytesPerSecond)
{
    lt::settings_pack pack;
    pack.set_int(lt::settings_pack::upload_rate_limit, rateSetting(uploadBytesPerSecond));
    pack.set_int(lt::settings_pack::download_rate_limit, rateSetting(downloadBytesPerSecond));
    m_state->session->apply_settings(std::move(pack));
}

Status SwarmSession::seed(const TorrentFile& torrent, const std::filesystem::path& dir, bool superSeed)
{
    return add(torrent, dir, true, superSeed);
}

Status SwarmSession::download(const TorrentFile& torrent, const std::filesystem::path& dir)
{
    return add(torrent, dir, false, false);
}

Status SwarmSession::add(const TorrentFile& torrent, const std::filesystem::path& dir, bool seed, bool superSeed)
{
    {
        std::lock_guard lock(m_state->mutex);
        if (m_state->torrents.count(torrent.infoHash))
            return Status::success();
    }
    lt::add_torrent_params params;
    lt::error_code ec;
    params.ti = std::make_shared<lt::torrent_info>(
        lt::span<const char>(torrent.bytes.data(), long(torrent.bytes.size())), ec, lt::from_span);
    if (ec)
        return Error::make(net::errc::kMalformed, "not a torrent: " + ec.message());
    params.save_path = dir.string();
    // Every torrent here runs: libtorrent's queue (a few active at a time)
    // would leave a coordinator's older checkpoints unseeded.
    params.flags &= ~(lt::torrent_flags::auto_managed | lt::torrent_flags::paused);
    if (seed)
        params.flags |= lt::torrent_flags::seed_mode;
    if (superSeed)
        params.flags |= lt::torrent_flags::super_seeding;
    std::lock_guard lock(m_state->mutex);
    lt::torrent_handle handle = m_state->session->add_torrent(std::move(params), ec);
    if (ec)
        return Error::make(net::errc::kIoError, "cannot add the torrent of " + torrent.fileName + ": " + ec.message());
    m_state->torrents[torrent.infoHash].handle = handle;
    return Status::success();
}

void SwarmSession::addPeers(const std::string& infoHash, const std::vector<PeerEndpoint>& peers)
{
    std::lock_guard lock(m_state->mutex);
    auto it = m_state->torrents.find(infoHash);
    if (it == m_state->torrents.end())
        return;
    for (const PeerEndpoint& peer : peers) {
        lt::error_code ec;
        const lt::address address = lt::make_address(peer.host, ec);
        if (!ec && peer.port != 0)
            it->second.handle.connect_peer(lt::tcp::endpoint(address, peer.port));
    }
}

void SwarmSession::remove(const std::string& infoHash)
{
    std::lock_guard lock(m_state->mutex);
    auto it = m_state->torrents.find(infoHash);
    if (it == m_state->torrents.end())
        return;
    const lt::torrent_status status = it->second.handle.status();
    m_state->removedUploaded += uint64_t(status.total_payload_upload);
    m_state->removedDownloaded += uint64_t(status.total_payload_download);
    m_state->session->remove_torrent(it->second.handle);
    m_state->torrents.erase(it);
}

bool SwarmSession::flush(const std::string& infoHash, std::chrono::milliseconds wait)
{
    std::unique_lock lock(m_state->mutex);
    auto it = m_state->torrents.find(infoHash);
    if (it == m_state->torrents.end())
        return false;
    const uint64_t before = it->second.flushes;
    it->second.handle.flush_cache();
    return m_state->flushed.wait_for(lock, wait, [&] {
        auto now = m_state->torrents.find(infoHash);
        return now == m_state->torrents.end() || now->second.flushes > before;
    }) && m_state->torrents.count(infoHash) > 0;
}

void SwarmSession::pause(const std::string& infoHash, bool paused)
{
    std::lock_guard lock(m_state->mutex);
    auto it = m_state->torrents.find(infoHash);
    if (it == m_state->torrents.end())
        return;
    if (paused)
        it->second.handle.pause();
    else
        it->second.handle.resume();
}

void SwarmSession::setSuperSeed(const std::string& infoHash, bool on)
{
    std::lock_guard lock(m_state->mutex);
    auto it = m_state->torrents.find(infoHash);
    if (it == m_state->torrents.end())
        return;
    if (on)
        it->second.handle.set_flags(lt::torrent_flags::super_seeding);
    else
        it->second.handle.unset_flags(lt::torrent_flags::super_seeding);
}

bool SwarmSession::has(const std::string& infoHash) const
{
    std::lock_guard lock(m_state->mutex);
    return m_state->torrents.count(infoHash) > 0;
}

std::vector<std::string> SwarmSession::torrents() const
{
    std::lock_guard lock(m_state->mutex);
    std::vector<std::string> keys;
    for (const auto& [key, entry] : m_state->torrents)
        keys.push_back(key);
    return keys;
}

std::optional<TorrentProgress> SwarmSession::progress(const std::string& infoHash) const
{
    std::lock_guard lock(m_state->mutex);
    auto it = m_state->torrents.find(infoHash);
    if (it == m_state->torrents.end())
        return std::nullopt;
    const lt::torrent_status status = it->second.handle.status();
    TorrentProgress progress;
    progress.fileBytes = uint64_t(std::max<int64_t>(status.total_wanted, 0));
    progress.doneBytes = uint64_t(std::max<int64_t>(status.total_wanted_done, 0));
    progress.downloadedPayload = uint64_t(status.total_payload_download);
    progress.uploadedPayload = uint64_t(status.total_payload_upload);
    progress.downloadRate = uint64_t(std::max(status.download_payload_rate, 0));
    progress.uploadRate = uint64_t(std::max(status.upload_payload_rate, 0));
    progress.peers = status.num_peers;
    progress.seeds = status.num_seeds;
    progress.complete
        = status.is_seeding || (status.total_wanted > 0 && status.total_wanted_done == status.total_wanted);
    progress.seeding = status.is_seeding;
    progress.hashFailures = it->second.hashFailures;
    progress.bannedPeers = it->second.bannedPeers;
    progress.error = status.errc ? status.errc.message() : it->second.error;
    return progress;
}

std::vector<PeerStats> SwarmSession::peerStats(const std::string& infoHash) const
{
    std::lock_guard lock(m_state->mutex);
    std::vector<PeerStats> stats;
    auto it = m_state->torrents.find(infoHash);
    if (it == m_state->torrents.end())
        return stats;
    std::vector<lt::peer_info> peers;
    it->second.handle.get_peer_info(peers);
    for (const lt::peer_info& peer : peers)
        stats.push_back({{peer.ip.address().to_string(), peer.ip.port()}, uint64_t(peer.total_download),
            uint64_t(peer.total_upload), bool(peer.flags & lt::peer_info::seed)});
    return stats;
}

SwarmTotals SwarmSession::totals() const
{
    std::lock_guard lock(m_state->mutex);
    SwarmTotals totals{m_state->removedUploaded, m_state->removedDownloaded};
    for (const auto& [key, entry] : m_state->torrents) {
        const lt::torrent_status status = entry.handle.status();
        totals.uploaded += uint64_t(status.total_payload_upload);
        totals.downloaded += uint64_t(status.total_payload_download);
    }
    return totals;
}

} // namespace crowdtrain::swarm
