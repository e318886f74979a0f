#pragma once

// One libtorrent session: what a coordinator seeds, what a volunteer's
// daemon downloads and seeds back (docs/architecture.md, "The swarm").
// Configured as a polite client on a home machine: no DHT, no local peer
// discovery, no UPnP or NAT-PMP, no trackers (peers come from the hub's
// `swarm_peers`, docs/protocol.md), one listening port, and the rate limits
// applied to every peer, loopback and LAN included (libtorrent exempts
// local peers by default; a volunteer's limit is about its link).
//
// Torrents are keyed by their v1 info-hash (hex). Pieces are hash-checked
// by libtorrent (SHA-1 per piece, and the v2 SHA-256 Merkle tree per
// block); a peer whose data fails is banned by libtorrent's smart-ban,
// and both are counted per torrent. The caller still checks the finished
// file against the SHA-256 the hub published.
//
// Thread-safe: libtorrent runs its own network and disk threads, and one
// thread here reads its alerts (errors, hash failures, bans, listen
// results). The destructor removes every torrent (files stay) and stops the
// session.

#include "core/result.h"
#include "net/swarm/torrent_file.h"

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace crowdtrain::swarm {

struct SwarmSettings {
    // Where to listen: an address ("0.0.0.0", "127.0.0.1", "[::]") and a
    // port (0: a port free for TCP and UDP, the same on every interface;
    // listenPort() tells which).
    std::string listenAddress = "0.0.0.0";
    uint16_t listenPort = 0;
    uint64_t uploadBytesPerSecond = 0; // 0: unlimited
    uint64_t downloadBytesPerSecond = 0; // 0: unlimited
    int maxConnections = 200; // across all torrents
    // Peers sent to at once (libtorrent's unchoke slots): 0 keeps
    // libtorrent's default (8, rotated); -1: every interested peer, as a
    // server sending to all at once (bench_swarm's host-only baseline).
    int unchokeSlots = 0;
    // Peers tell each other of peers (ut_pex, BEP 11). Off only where every
    // byte must come from the seed (bench_swarm's baseline).
    bool peerExchange = true;
};

struct PeerEndpoint {
    std::string host; // an IP address
    uint16_t port = 0;
    bool operator==(const PeerEndpoint&) const = default;
};

struct TorrentProgress {
    uint64_t fileBytes = 0;
    uint64_t doneBytes = 0; // verified bytes on disk
    uint64_t downloadedPayload = 0; // payload received since added (including failed pieces)
    uint64_t uploadedPayload = 0; // payload sent since added
    uint64_t downloadRate = 0; // bytes per second, now
    uint64_t uploadRate = 0;
    int peers = 0; // connected peers
    int seeds = 0; // of which have the whole file
    bool complete = false; // every piece verified
    bool seeding = false;
    uint64_t hashFailures = 0; // pieces that failed their check
    uint64_t bannedPeers = 0; // peers banned for bad data
    std::string error; // the torrent's error, if it stopped on one
};

// One connected peer of a torrent, and the payload exchanged with it.
struct PeerStats {
    PeerEndpoint endpoint;
    uint64_t downloaded = 0; // payload received from it
    uint64_t uploaded = 0; // payload sent to it
    bool seed = false; // it has the whole file
};

struct SwarmTotals {
    uint64_t uploaded = 0;
    uint64_t downloaded = 0;
};

class SwarmSession {
public:
    // Starts the session and waits (up to 10 s) until it listens. Errors:
    // "address_in_use" or "io_error" (cannot listen), "invalid_argument".
    static Result<std::unique_ptr<SwarmSession>> start(const SwarmSettings& settings);
    ~SwarmSession();
    SwarmSession(const SwarmSession&) = delete;
    SwarmSession& operator=(const SwarmSession&) = delete;

    uint16_t listenPort() const;
    void setRates(uint64_t uploadBytesPerSecond, uint64_t downloadBytesPerSecond);

    // Seeds `torrent`'s file from `dir` (dir / fileName): a file the caller
    // has verified, so libtorrent checks each piece lazily the first time a
    // peer asks for it instead of reading the whole file now. `superSeed`:
    // reveal pieces one at a time so that peers spread them (BEP 16), for a
    // seed on a narrow uplink. Seeding a torrent already here changes nothing.
    Status seed(const TorrentFile& torrent, const std::filesystem::path& dir, bool superSeed = false);
    // Downloads `torrent` into `dir` (dir / fileName). Pieces already in a
    // file there (an interrupted download) are checked and kept.
    Status download(const TorrentFile& torrent, const std::filesystem::path& dir);
    // Connects to these peers for the torrent (unknown hashes are ignored;
    // peers already connected are not connected twice).
    void addPeers(const std::string& infoHash, const std::vector<PeerEndpoint>& peers);
    // Stops seeding or downloading; the file stays on disk.
    void remove(const std::string& infoHash);
    // Waits until every piece libtorrent has verified is in the file on disk
    // (a piece passes its hash check from the write buffer, before the write
    // lands): false when the torrent is unknown or the wait ran out.
    bool flush(const std::string& infoHash, std::chrono::milliseconds wait = std::chrono::seconds(30));
    void pause(const std::string& infoHash, bool paused);
    // Super-seeding (BEP 16) on or off for a torrent this session seeds.
    void setSuperSeed(const std::string& infoHash, bool on);

    bool has(const std::string& infoHash) const;
    std::vector<std::string> torrents() const;
    std::optional<TorrentProgress> progress(const std::string& infoHash) const;
    std::vector<PeerStats> peerStats(const std::string& infoHash) const;
    // Payload bytes sent and received by every torrent since the session
    // started, removed ones included.
    SwarmTotals totals() const;
    uint64_t totalUploaded() const { return totals().uploaded; }

private:
    struct State;
    explicit SwarmSession(std::unique_ptr<State> state);
    static Result<std::unique_ptr<SwarmSession>> startOn(const SwarmSettings& settings);
    Status add(const TorrentFile& torrent, const std::filesystem::path& dir, bool seed, bool superSeed);
    std::unique_ptr<State> m_state;
};

// "1.2.3.4" or "::1": whether `host` is an IP address libtorrent can dial.
bool isIpAddress(const std::string& host);

} // namespace crowdtrain::swarm
