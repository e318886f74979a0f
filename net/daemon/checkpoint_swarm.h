#pragma once

// The daemon's side of the checkpoint swarm (net/swarm; docs/architecture.md,
// "The swarm"). A checkpoint file the hub offers as a torrent is downloaded
// through libtorrent: the .torrent is fetched from the hub (a small
// verified resource), the hub's `swarm_peers` names who to dial (the hub
// itself first), and the finished file is checked against the SHA-256 the
// hub published, as a chunked download is. When no payload arrives for
// fallbackSeconds (no peer answers, or the swarm stalls), the torrent is
// dropped and the caller downloads the file in chunks from the hub.
//
// Afterwards the daemon seeds what it downloaded, as the `seeding` setting
// says: "while_training" (the default: only while a joined project
// trains), "always", or "never"; every payload byte counts toward the
// month and keeps to the upload and download limits, and nothing is
// shared once the month's data cap is reached. The torrent of a deleted
// checkpoint is dropped before its folder goes. A seeded folder keeps its
// .torrent (".<file>.torrent") and its hub (".hub"), so seeding resumes
// after a restart.
//
// The libtorrent session starts at the first torrent and listens on the
// `swarm_port` setting (0: a free port). Thread-safe: download() runs on
// the checkpoint worker, tick() on this class's own thread (every 2 s),
// the rest anywhere. m_mutex is held across the session's start (seconds,
// up to five tries) and libtorrent's answers, so status() and
// folderStatus() never take it: they read the view each change and each
// tick publish (as qBittorrent caches libtorrent's status).

#include "net/control/value.h"
#include "net/daemon/hub_directory.h"
#include "net/limits/throttle.h"
#include "net/swarm/swarm_fetch.h"
#include "net/swarm/swarm_session.h"
#include "net/wire/messages_common.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace crowdtrain::daemon {

struct CheckpointSwarmOptions {
    std::shared_ptr<limits::NetworkThrottle> throttle; // may be null
    // "while_training" | "always" | "never" (the `seeding` setting).
    std::function<std::string()> seeding;
    std::function<bool()> training; // a joined project trains now
    std::function<uint16_t()> listenPort; // the `swarm_port` setting
    std::function<bool()> capReached; // the month's data cap is reached
    std::function<Result<HubLink>(const std::string& hub)> resolve; // "demo" or a link, as it is now
    std::function<void(const std::string&)> log;
    int fallbackSeconds = 30;
    int announceSeconds = 60; // how often a seeded torrent is announced to its hub
};

using swarm::SwarmDownload;
using swarm::SwarmSources;

class CheckpointSwarm {
public:
    explicit CheckpointSwarm(HubDirectory& hubs, CheckpointSwarmOptions options);
    ~CheckpointSwarm();

    // Downloads `file` (which has a torrent) into `target` via the swarm.
    SwarmDownload download(const HubLink& hub, const std::string& project, const net::FileInfo& file,
        const std::filesystem::path& target, const std::atomic<bool>* cancel,
        const std::function<void(uint64_t doneBytes, const SwarmSources&)>& progress);

    // A checkpoint folder now complete: its files with a .torrent beside
    // them are seeded (as the setting allows) and announced to the hub.
    void adopt(const std::string& hubLabel, const std::string& project, const std::filesystem::path& folder);
    // The folder is about to be deleted: its torrents stop.
    void forget(const std::filesystem::path& folder);
    // Every downloaded folder under `root` (<project>/round-<R>/) that holds a .torrent.
    void adoptAll(const std::filesystem::path& root);

    // The session (started now if need be; null when it cannot listen),
    // for the joined project's agent to fetch and seed full states with:
    // its traffic is counted and limited here with the checkpoints'.
    swarm::SwarmSession* sharedSession();
    // Whether the setting, the state and the cap allow seeding now.
    bool seedingAllowed() const;
    // Stops the ticker (the destructor does it too): before whatever the
    // options' callbacks use goes away.
    void stopTicking();

    // Applies the setting, the limits and the cap; announces seeded
    // torrents to their hubs every announceSeconds.
    void tick();
    // {listening, port, seeding: bool (allowed now), uploaded_bytes,
    //  downloaded_bytes, torrents: [{project, file, folder, info_hash, peers, uploaded_bytes}]},
    // as of the last tick or change (at most 2 s old).
    control::Value status() const;
    // For a folder that holds a seeded file: {seeding, seed_peers,
    // uploaded_bytes}; nil otherwise. As of the last tick or change.
    control::Value folderStatus(const std::filesystem::path& folder) const;

private:
    struct Seeded {
        std::string hubLabel;
        std::string project;
        std::filesystem::path folder;
        swarm::TorrentFile torrent;
        bool active = false; // in the session now
        std::chrono::steady_clock::time_point announcedAt{};
    };
    // What status() shows: published under m_viewMutex by publishLocked().
    struct TorrentView {
        std::string project, file, infoHash;
        std::filesystem::path folder;
        bool active = false;
        int64_t peers = 0;
        uint64_t uploadedBytes = 0;
    };
    struct View {
        bool listening = false;
        int64_t port = 0;
        bool seeding = false;
        swarm::SwarmTotals totals;
        std::vector<TorrentView> torrents;
    };

    swarm::SwarmSession* session(); // started on first use; null if it cannot listen
    // Asks libtorrent and publishes the view (m_mutex held).
    void publishLocked();
    void wakeTicker();
    // Seeds or stops each torrent as the setting allows now (m_mutex held).
    void activateLocked();
    void applyLimits(swarm::SwarmSession& session);
    void countTraffic(swarm::SwarmSession& session);
    std::vector<swarm::PeerEndpoint> askPeers(
        const HubLink& hub, const std::string& project, const std::string& infoHash, bool seeding, std::string* error);

    HubDirectory& m_hubs;
    CheckpointSwarmOptions m_options;
    mutable std::mutex m_mutex;
    std::unique_ptr<swarm::SwarmSession> m_session;
    std::map<std::string, Seeded> m_seeded; // by info-hash
    uint64_t m_countedUp = 0;
    uint64_t m_countedDown = 0;
    mutable std::mutex m_viewMutex; // guards m_view only; never held across anything else
    View m_view;
    std::mutex m_tickMutex;
    std::condition_variable m_tickWake;
    bool m_stopping = false;
    bool m_tickNow = true; // tick at once (at the start; a folder adopted, the session started)
    std::thread m_ticker; // tick() every 2 s
};

} // namespace crowdtrain::daemon
