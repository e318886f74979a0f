#pragma once

// When a failed round close is tried again. A close that fails (a full
// disk: the next version's files do not fit) changes nothing, so the round
// stays open and is closed later; trying at every tick (50 ms) would write
// and delete the version's files over and over and print a line each time.
// Instead the next try waits kFirstDelayMs, doubling up to kMaxDelayMs; the
// error is logged when it first happens (and again only when it changes),
// and the close that finally succeeds says how many tries failed before it.
//
// Used from the server's loop (ProjectRuntime), on the steady clock.

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

namespace crowdtrain::coordinator {

class CloseRetry {
public:
    static constexpr int64_t kFirstDelayMs = 1000;
    static constexpr int64_t kMaxDelayMs = 16000;

    // Whether a close may begin now.
    bool due(int64_t steadyMs) const { return m_failures == 0 || steadyMs >= m_retryAtMs; }
    // A close failed with `error`: true when this is worth a line in the log.
    bool failed(const std::string& error, int64_t steadyMs)
    {
        const int64_t delayMs = std::min(kMaxDelayMs, kFirstDelayMs << std::min(m_failures, 4));
        ++m_failures;
        m_retryAtMs = steadyMs + delayMs;
        const bool news = error != m_lastError;
        m_lastError = error;
        return news;
    }
    int64_t retryDelayMs(int64_t steadyMs) const { return std::max<int64_t>(0, m_retryAtMs - steadyMs); }
    // A close succeeded: the failed tries before it (0: none).
    int succeeded()
    {
        m_lastError.clear();
        m_retryAtMs = 0;
        return std::exchange(m_failures, 0);
    }

private:
    int m_failures = 0;
    int64_t m_retryAtMs = 0;
    std::string m_lastError;
};

} // namespace crowdtrain::coordinator
