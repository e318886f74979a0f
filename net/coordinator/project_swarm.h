#pragma once

// A project's published files in the BitTorrent swarm (net/swarm): each
// file of at least kTorrentMinBytes (a checkpoint's model.safetensors) gets
// a torrent, seeded by the coordinator's session, its .torrent published as
// the resource "torrent/<file's resource>"; and the table of who holds
// each, which `swarm_peers` answers from (docs/protocol.md, "Swarm"). The
// coordinator is thus the swarm's seed and its tracker, over its own
// protocol: no public tracker or DHT.
//
// A torrent is made once per file (hashing it) and kept beside it as
// ".<name>.torrent", so a restarted coordinator seeds the same info-hash
// without hashing again.
//
// While kSuperSeedFrom (8) or more peers download a torrent (connected to
// the hub, or asking for peers in the last 30 s) it is super-seeded (BEP 16:
// each peer is shown a piece at a time, so the peers spread pieces among
// themselves and the hub's uplink sends a few copies); fewer downloaders
// get plain seeding. Super-seeding gates each peer's next piece on the
// last one reaching another peer, so over home uplinks (a fifth of the
// downlinks) it is slow: on the home-link bench a fibre joiner took 3x and
// a cable one 1.5x the time of plain seeding (bench/RESULTS.md, session
// 20); a handful of copies costs the hub less than that.
//
// Used from the coordinator's loop thread only (cacheTorrent from any).

#include "core/result.h"
#include "net/swarm/swarm_session.h"
#include "net/transfer/resource_table.h"
#include "net/wire/messages_common.h"
#include "net/wire/messages_resource.h"

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>

namespace crowdtrain::coordinator {

inline constexpr uint64_t kTorrentMinBytes = 1 << 20;
inline constexpr std::string_view kTorrentResourcePrefix = "torrent/";

// Hashes `file` into its torrent and keeps it beside the file (as publish
// does), so that a later publish() of it hashes nothing: for a worker
// thread, before the loop publishes. Files under kTorrentMinBytes are left.
Status cacheTorrent(const std::filesystem::path& file);

class ProjectSwarm {
public:
    // `session` may be null (the swarm is off): then nothing is published.
    ProjectSwarm(swarm::SwarmSession* session, net::ResourceTable& resources);

    bool enabled() const { return m_session != nullptr; }
    // Seeds `file`, published as `resource`, when it is large enough; its
    // .torrent becomes a resource. Publishing a resource again changes nothing.
    Status publish(const std::string& resource, const std::filesystem::path& file);
    // Stops seeding (a checkpoint retention removed); the .torrent resource goes too.
    void withdraw(const std::string& resource);
    // Resources seeded now.
    std::vector<std::string> published() const;
    std::optional<net::TorrentRef> torrentOf(const std::string& resource) const;
    // The file resource a torrent's info-hash stands for.
    std::optional<std::string> resourceOf(const std::string& infoHash) const;

    // Records `key`, reached at `address`, as a peer of the torrent (when it
    // listens: port > 0) and lists up to net::kMaxSwarmPeers to dial: the hub
    // first (host ""), then peers with the whole file, then the most recently
    // heard of. The asker is never listed to itself. Entries not renewed for
    // kPeerLifetimeMs are dropped. Errors: "not_found" (no such torrent here).
    Result<net::SwarmPeersReply> peers(
        const std::string& key, const net::SwarmPeersRequest& request, const std::string& address, int64_t nowMs);
    // Super-seeding on or off by the number of downloaders (connected, or
    // asking for peers in the last kAskedRecentlyMs).
    void tick(int64_t nowMs);

    static constexpr std::size_t kSuperSeedFrom = 8;
    static constexpr int64_t kPeerLifetimeMs = 15 * 60 * 1000;
    static constexpr int64_t kAskedRecentlyMs = 30 * 1000;
    static constexpr std::size_t kMaxPeersPerTorrent = 10000;

private:
    struct Peer {
        std::string address;
        uint16_t port = 0;
        bool seeding = false;
        int64_t seenMs = 0;
    };
    struct Seeded {
        swarm::TorrentFile torrent;
        net::TorrentRef ref;
        std::map<std::string, Peer> peers; // by public key
        bool superSeeding = false;
    };

    // Peers without the whole file that asked in the last kAskedRecentlyMs.
    static std::size_t downloadersAsking(const Seeded& seeded, int64_t nowMs);

    swarm::SwarmSession* m_session;
    net::ResourceTable& m_resources;
    std::map<std::string, Seeded> m_seeded; // by file resource
    std::map<std::string, std::string> m_byInfoHash; // info-hash -> file resource
};

} // namespace crowdtrain::coordinator
