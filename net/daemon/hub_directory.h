#pragma once

// The hubs a volunteer follows and what they last said: each hub's projects
// (list_projects), when it last answered and, when it did not, why. refresh()
// asks every hub once (a short timeout each) and is called by the daemon's
// poller; the catalog is read from the cache, so a slow or unreachable hub
// never holds a control request up. call() runs one request against a hub
// with this volunteer's identity (metrics, leaderboard, my_stats,
// list_checkpoints, describe/fetch through a Client the caller owns).
//
// Thread-safe: the cache is guarded; each call opens its own Client (ZeroMQ
// sockets stay on the thread that uses them).

#include "core/clock.h"
#include "net/daemon/hub_link.h"
#include "net/transport/client.h"
#include "net/transport/curve_keys.h"
#include "net/wire/messages.h"

#include <chrono>
#include <mutex>
#include <optional>
#include <vector>

namespace crowdtrain::daemon {

struct HubEntry {
    std::string link; // formatHubLink
    HubLink hub;
    std::string label; // "demo" for the built-in demo hub, else ""
    std::vector<net::ProjectInfo> projects;
    std::optional<int64_t> lastSeenMs; // Unix ms of the last answer
    std::string error; // why the last refresh failed ("" when it answered)
};

class HubDirectory {
public:
    HubDirectory(zmq::context_t& context, net::CurveKeyPair identity);

    void follow(const HubLink& hub, const std::string& label = {});
    bool unfollow(const std::string& link); // false when not followed
    std::vector<HubEntry> entries() const;
    std::optional<HubEntry> find(const std::string& link) const;

    // Asks every followed hub for its projects now.
    void refresh(int timeoutMs = 2000);
    void refreshOne(const std::string& link, int timeoutMs = 2000);

    // A client to `hub` with this volunteer's identity.
    Result<std::unique_ptr<net::Client>> connect(const HubLink& hub) const;
    template <typename Reply, typename Request>
    Result<Reply> call(const HubLink& hub, const Request& request, int timeoutMs = 5000) const
    {
        auto client = connect(hub);
        if (!client)
            return client.error();
        return (*client)->request<Reply>(request, timeoutMs);
    }

private:
    zmq::context_t& m_context;
    net::CurveKeyPair m_identity;
    mutable std::mutex m_mutex;
    std::vector<HubEntry> m_entries;
};

using core::unixNowMs;

} // namespace crowdtrain::daemon
