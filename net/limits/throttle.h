#pragma once

// The volunteer's network limits: a token bucket per direction (a rate in
// bytes per second, 0 = unlimited, with one second of burst) and a count of
// every byte that passed, from which the daemon keeps the month's usage.
// Transfers are sequences of requests, so delaying each request by the bytes
// it moved holds the average to the rate. One throttle is the one budget of
// every path: the agent's requests, the checkpoints' chunks (reserved before
// each chunk is asked for, so even a one-chunk file never comes faster than
// the rate) and the swarm (paced by libtorrent at the same rate, its bytes
// charged here as they are seen, so the other paths wait for them). Each
// byte is counted once.
//
// Thread-safe: the agent's thread and the checkpoint downloader share one.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>

namespace crowdtrain::limits {

class TokenBucket {
public:
    using Clock = std::chrono::steady_clock;

    void setRate(uint64_t bytesPerSecond);
    uint64_t rate() const;
    // Takes `bytes` from the bucket and returns how long to wait before the
    // next transfer (zero when within the rate).
    std::chrono::milliseconds take(uint64_t bytes, Clock::time_point now);
    // Gives back bytes taken for a transfer that moved less (at most one
    // second of burst in the bucket afterwards).
    void giveBack(uint64_t bytes);

private:
    mutable std::mutex m_mutex;
    uint64_t m_rate = 0;
    double m_tokens = 0;
    Clock::time_point m_last{};
};

class NetworkThrottle {
public:
    enum class Direction { Up, Down };

    void setRates(uint64_t uploadBytesPerSecond, uint64_t downloadBytesPerSecond);
    // Counts `bytes` and waits as the rate requires; returns early (false)
    // once `cancel` is set.
    bool pass(Direction direction, uint64_t bytes, const std::atomic<bool>* cancel);
    // Every byte that passed, both directions.
    uint64_t totalBytes() const { return m_total.load(); }
    // Before a transfer of about `bytes`: takes them from the budget and
    // waits until they are paid for, so they never come faster than the
    // rate. Nothing is counted yet: settle() says what moved. Returns false
    // (the bytes given back) once `cancel` is set.
    bool reserve(Direction direction, uint64_t bytes, const std::atomic<bool>* cancel);
    // After reserve(): counts `moved` and corrects the budget by what the
    // reservation guessed (a failed transfer moved 0).
    void settle(Direction direction, uint64_t reserved, uint64_t moved);
    // Bytes another limiter already paced (the swarm's libtorrent session
    // keeps to rate() itself): counted, and taken from the same budget
    // without waiting, so the other paths wait for them.
    void charge(Direction direction, uint64_t bytes);
    uint64_t rate(Direction direction) const { return direction == Direction::Up ? m_up.rate() : m_down.rate(); }
    // The month's data cap is reached: transfers that can wait do.
    void setCapReached(bool reached) { m_capReached.store(reached); }
    bool capReached() const { return m_capReached.load(); }

private:
    TokenBucket& bucket(Direction direction) { return direction == Direction::Up ? m_up : m_down; }
    bool waitUntil(TokenBucket::Clock::time_point until, const std::atomic<bool>* cancel);

    TokenBucket m_up;
    TokenBucket m_down;
    std::atomic<uint64_t> m_total{0};
    std::atomic<bool> m_capReached{false};
};

} // namespace crowdtrain::limits
