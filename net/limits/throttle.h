#pragma once

// The volunteer's network limits: a token bucket per direction (a rate in
// bytes per second, 0 = unlimited, with one second of burst) and a count of
// every byte that passed, from which the daemon keeps the month's usage.
// Transfers are sequences of requests, so delaying each request by the bytes
// it moved holds the average to the rate.
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
    // Counts bytes another limiter already paced (the swarm's libtorrent
    // session keeps to rate() itself).
    void count(uint64_t bytes) { m_total.fetch_add(bytes); }
    uint64_t rate(Direction direction) const { return direction == Direction::Up ? m_up.rate() : m_down.rate(); }
    // The month's data cap is reached: transfers that can wait do.
    void setCapReached(bool reached) { m_capReached.store(reached); }
    bool capReached() const { return m_capReached.load(); }

private:
    TokenBucket m_up;
    TokenBucket m_down;
    std::atomic<uint64_t> m_total{0};
    std::atomic<bool> m_capReached{false};
};

} // namespace crowdtrain::limits
