#pragma once

// One file downloaded through the swarm, as every client of ours does it
// (docs/architecture.md, "The swarm"): the hub's `swarm_peers` names who
// to dial (the hub's own seed first), asked every 10 s (every 3 s while no
// peer is connected); the bytes are told apart by source (the hub's seed
// or other peers); the finished file is checked against the SHA-256 the
// hub published. When no verified piece arrives for `fallbackSeconds`
// (no peer answers, or the swarm stalls), the torrent is dropped and the
// verdict is Fallback: the caller downloads the file in chunks instead.
// The torrent leaves the session at the end either way; a caller that
// seeds the file afterwards adds it again.
//
// Used by the daemon's checkpoints (net/daemon/checkpoint_swarm.h) and the
// volunteer's full-state download (net/volunteer/state_swarm.h).

#include "net/swarm/swarm_session.h"

#include <atomic>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace crowdtrain::swarm {

// Where a swarm download's bytes came from.
struct SwarmSources {
    uint64_t fromPeers = 0; // payload from other volunteers
    uint64_t fromHub = 0; // payload from the hub's seed
    int peers = 0; // connected peers now
};

struct SwarmDownload {
    enum Verdict { Done, Fallback, Cancelled };
    Verdict verdict = Fallback;
    std::string why; // for Fallback: why the swarm was left
    SwarmSources sources;
};

struct FetchHooks {
    // The peers to dial now, the hub first; on failure empty, with *error
    // set. Called on the fetching thread.
    std::function<std::vector<PeerEndpoint>(std::string* error)> askPeers;
    // Called every poll (250 ms) before progress is judged: counts traffic,
    // applies limits; a reason returned stops the fetch (Fallback), e.g.
    // "the month's data cap is reached".
    std::function<std::optional<std::string>()> eachPoll;
    std::function<void(uint64_t doneBytes, const SwarmSources&)> progress;
    const std::atomic<bool>* cancel = nullptr;
    int fallbackSeconds = 30;
};

// An IP address for `host` (itself when it is one), for libtorrent to
// dial; nullopt when the name does not resolve.
std::optional<std::string> dialableAddress(const std::string& host);

// The .torrent the hub served for a file it listed: read from
// `torrentFile` and checked to describe that file (its info-hash, name and
// size); a file that does not is removed. Errors: "malformed" and the
// reader's.
Result<TorrentFile> loadListedTorrent(const std::filesystem::path& torrentFile, const std::string& infoHash,
    const std::string& fileName, uint64_t fileBytes);

// Downloads `torrent` into dir / torrent.fileName through `session` and
// checks it against `sha256` (hex). A file that fails is removed.
SwarmDownload fetch(SwarmSession& session, const TorrentFile& torrent, const std::filesystem::path& dir,
    const std::string& sha256, const FetchHooks& hooks);

} // namespace crowdtrain::swarm
