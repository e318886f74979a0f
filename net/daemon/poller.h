#pragma once

// The daemon's beat (every pollMs): the limits evaluated and applied, this
// machine's history sampled, and the `progress` event (and `state` when the
// status text changed) sent. Every hubRefreshMs, on a queue of its own so a
// silent hub never holds the events up: the catalog refreshed, the joined
// project's new metric rows fetched (the `metrics` event), and a newer
// checkpoint announced (`checkpoint_published`) and, when the settings say
// so, downloaded.
//
// Threads: its own, and its background queue; both stop and are joined by
// stop() or the destructor.

#include "net/daemon/checkpoints.h"
#include "net/daemon/history_cache.h"
#include "net/daemon/joined_project.h"
#include "net/daemon/live_settings.h"
#include "net/daemon/work_queue.h"

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>

namespace crowdtrain::daemon {

struct PollerParts {
    JoinedProject& joined;
    HistoryCache& history;
    HubDirectory& hubs;
    Checkpoints& checkpoints;
    LiveSettings& settings;
    std::function<control::Value()> status;
    std::function<void(std::string_view type, const control::Value& body)> publish;
    int pollMs = 500;
    int hubRefreshMs = 5000;
};

class Poller {
public:
    explicit Poller(PollerParts parts); // starts at once
    ~Poller();
    void stop();
    // The next beat now rather than at its period: a change the volunteer
    // made (pause, snooze, a generation ended) shows in the `state` event
    // at once. Any thread.
    void beatNow();

private:
    void loop();
    void refreshHubs();
    void announceCheckpoint(const HubLink& hub, const std::string& hubText, const std::string& project);

    PollerParts m_parts;
    std::mutex m_mutex;
    std::condition_variable m_wake;
    bool m_stopping = false;
    bool m_beatNow = false;
    std::string m_lastStateText;
    WorkQueue m_background; // the hub refresh
    std::atomic<bool> m_refreshing{false}; // one is queued or running
    std::thread m_thread;
};

} // namespace crowdtrain::daemon
