#pragma once

// The volunteers of one project at run time: who has a live session, its
// id, and when it was last heard from. A session starts at join and ends at
// leave or after interval x liveness without a request. Sessions are not
// durable: after a coordinator restart every volunteer joins again.
//
// Used from one thread (the server's loop).

#include "core/result.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace crowdtrain::coordinator {

class Sessions {
public:
    Sessions(uint64_t heartbeatIntervalMs, uint64_t heartbeatLiveness)
        : m_intervalMs(int64_t(heartbeatIntervalMs))
        , m_deadAfterMs(int64_t(heartbeatIntervalMs * heartbeatLiveness))
    { }

    // A new session for `key` (a second join replaces the first); its id.
    std::string join(const std::string& key, const std::string& displayName, int64_t nowMs);
    // Any request from `key` shows it is alive.
    void touch(const std::string& key, int64_t nowMs);
    // "not_joined" unless `session` is the live session of `key`.
    Status check(const std::string& key, const std::string& session, const std::string& project) const;
    // Ends the session; "not_joined" as check().
    Status leave(const std::string& key, const std::string& session, const std::string& project);
    // The keys whose sessions ended now for silence. A loop that stalled (a
    // slow disk, a descheduled process) adds its own silence to everyone's
    // last-seen time first, so that it never counts against the volunteers.
    std::vector<std::string> expire(int64_t nowMs);

    uint64_t online() const;

private:
    struct Volunteer {
        std::string displayName;
        std::string session;
        int64_t lastSeenMs = 0;
        bool online = false;
    };

    int64_t m_intervalMs;
    int64_t m_deadAfterMs;
    int64_t m_lastExpireMs = 0;
    std::map<std::string, Volunteer> m_volunteers;
};

} // namespace crowdtrain::coordinator
