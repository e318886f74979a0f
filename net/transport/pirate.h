#pragma once

// Paranoid Pirate reliability numbers (zguide chapter 4, ppworker.c), named
// once. A volunteer heartbeats every kHeartbeatIntervalMs while joined; the
// coordinator counts a volunteer gone after kHeartbeatLiveness intervals
// without any request from it, and a volunteer counts the coordinator gone
// after kHeartbeatLiveness unanswered intervals, then reconnects with
// exponential backoff from kReconnectInitialMs up to kReconnectMaxMs.
// The coordinator may announce other interval/liveness values at join.

#include <algorithm>
#include <cstdint>

namespace crowdtrain::net {

inline constexpr uint64_t kHeartbeatIntervalMs = 5000;
inline constexpr uint64_t kHeartbeatLiveness = 3;
inline constexpr uint64_t kReconnectInitialMs = 1000;
inline constexpr uint64_t kReconnectMaxMs = 32000;
// How long a client waits for one reply (a 4 MiB chunk on a slow uplink).
inline constexpr int kRequestTimeoutMs = 30000;
// How long a Curve handshake may take before the connection is dropped.
inline constexpr int kHandshakeTimeoutMs = 10000;

// The wait after `currentMs`: doubled, capped at kReconnectMaxMs.
constexpr uint64_t nextBackoffMs(uint64_t currentMs)
{
    return std::clamp<uint64_t>(currentMs * 2, kReconnectInitialMs, kReconnectMaxMs);
}

} // namespace crowdtrain::net
