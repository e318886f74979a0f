#pragma once

// The volunteer's reconnect schedule (Paranoid Pirate, zguide ch. 4): after
// the coordinator stops answering, wait kReconnectInitialMs, then twice as
// long after each failed attempt, up to kReconnectMaxMs; a successful join
// resets it. Plain value; one owner.

#include "net/transport/pirate.h"

#include <cstdint>

namespace crowdtrain::volunteer {

class ReconnectBackoff {
public:
    // The wait before the next attempt: kReconnectInitialMs first, then doubled, capped.
    uint64_t nextDelayMs()
    {
        m_delayMs = m_delayMs == 0 ? net::kReconnectInitialMs : net::nextBackoffMs(m_delayMs);
        ++m_attempts;
        return m_delayMs;
    }
    void reset()
    {
        m_delayMs = 0;
        m_attempts = 0;
    }
    uint64_t attempts() const { return m_attempts; }

private:
    uint64_t m_delayMs = 0;
    uint64_t m_attempts = 0;
};

// Counts unanswered heartbeats: the coordinator is gone after `liveness` in a row.
class Liveness {
public:
    explicit Liveness(uint64_t liveness = net::kHeartbeatLiveness)
        : m_liveness(liveness == 0 ? 1 : liveness)
    { }
    void answered() { m_missed = 0; }
    // True when this miss makes the server count as gone.
    bool missed() { return ++m_missed >= m_liveness; }
    uint64_t missedCount() const { return m_missed; }

private:
    uint64_t m_liveness;
    uint64_t m_missed = 0;
};

} // namespace crowdtrain::volunteer
