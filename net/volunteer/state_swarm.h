#pragma once

// The full model state through the project's swarm (docs/architecture.md,
// "The swarm"). When the join reply carries a state torrent and the agent
// has a swarm session, the state (4P bytes) comes from the hub's seed and
// from the volunteers who fetched it before: the .torrent is fetched from
// the hub as a verified resource, `swarm_peers` names the peers, and the
// whole file is checked against the join's state_sha256 (swarm::fetch).
// No verified piece for fallbackSeconds, or no session: the caller
// downloads the state in chunks, as before.
//
// The file is then kept under <project>/swarm/ and seeded, when seeding is
// allowed, while this volunteer's theta is at that version (announced to
// the hub once); when theta moves on, it leaves the swarm and is deleted.
// Limits and the traffic count are the session owner's (the daemon's
// CheckpointSwarm, or crowdtrain-worker's session).
//
// One owner (ThetaSync), used on run()'s thread only.

#include "net/swarm/swarm_fetch.h"
#include "net/volunteer/local_store.h"
#include "net/volunteer/reporter.h"
#include "net/volunteer/session.h"

#include <atomic>
#include <functional>
#include <optional>
#include <string>

namespace crowdtrain::volunteer {

struct StateSwarmOptions {
    // The session to download and seed with; null, or returning null: no swarm.
    std::function<swarm::SwarmSession*()> session;
    // Whether this volunteer may seed now; null: yes.
    std::function<bool()> seeding;
    int fallbackSeconds = 30;
};

class StateSwarm {
public:
    StateSwarm(Session& session, const ProjectFolder& folder, Reporter& reporter, StateSwarmOptions options);
    ~StateSwarm();
    StateSwarm(const StateSwarm&) = delete;
    StateSwarm& operator=(const StateSwarm&) = delete;

    // The state `join` describes, through the swarm: its bytes (checked
    // against join.stateSha256), or nullopt when the caller downloads it
    // in chunks (why is logged; nothing when there is no torrent). The
    // session is kept alive meanwhile, reporting `heldVersion`.
    std::optional<std::string> download(
        const net::JoinReply& join, uint64_t heldVersion, const std::atomic<bool>& stop);
    // theta is at `version` now: a seeded state of another version leaves
    // the swarm and its file goes; seeding stops when no longer allowed,
    // and starts again (announced to the hub) when allowed again.
    void holding(uint64_t version);

    // Payload of every state fetched through the swarm, by source.
    const swarm::SwarmSources& received() const { return m_received; }

private:
    struct Seeded {
        uint64_t version = 0;
        swarm::TorrentFile torrent;
        std::filesystem::path file;
        std::filesystem::path torrentFile;
    };
    // Seeds the held state and tells the hub; false when the session refused.
    bool seedHeld();
    std::vector<swarm::PeerEndpoint> askPeers(const std::string& infoHash, bool seeding, std::string* error);
    void retire();

    Session& m_session;
    const ProjectFolder& m_folder;
    Reporter& m_reporter;
    StateSwarmOptions m_options;
    swarm::SwarmSession* m_swarm = nullptr; // from options.session, at the first torrent
    std::optional<Seeded> m_seeded;
    swarm::SwarmSources m_received;
};

} // namespace crowdtrain::volunteer
