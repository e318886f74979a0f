#include "net/limits/throttle.h"

#include <algorithm>
#include <thread>

namespace crowdtrain::limits {

void TokenBucket::setRate(uint64_t bytesPerSecond)
{
    std::lock_guard lock(m_mutex);
    // From no limit: a full second of burst; otherwise no more than one.
    if (m_rate == 0)
        m_tokens = double(bytesPerSecond);
    else if (bytesPerSecond != m_rate)
        m_tokens = std::min(m_tokens, double(bytesPerSecond));
    m_rate = bytesPerSecond;
}

uint64_t TokenBucket::rate() const
{
    std::lock_guard lock(m_mutex);
    return m_rate;
}

std::chrono::milliseconds TokenBucket::take(uint64_t bytes, Clock::time_point now)
{
    std::lock_guard lock(m_mutex);
    if (m_rate == 0) {
        m_last = now;
        return std::chrono::milliseconds(0);
    }
    if (m_last != Clock::time_point{}) {
        const double seconds = std::chrono::duration<double>(now - m_last).count();
        m_tokens = std::min(double(m_rate), m_tokens + std::max(0.0, seconds) * double(m_rate));
    }
    m_last = now;
    m_tokens -= double(bytes);
    if (m_tokens >= 0)
        return std::chrono::milliseconds(0);
    return std::chrono::milliseconds(int64_t(-m_tokens * 1000.0 / double(m_rate)) + 1);
}

void TokenBucket::giveBack(uint64_t bytes)
{
    std::lock_guard lock(m_mutex);
    if (m_rate != 0)
        m_tokens = std::min(double(m_rate), m_tokens + double(bytes));
}

void NetworkThrottle::setRates(uint64_t uploadBytesPerSecond, uint64_t downloadBytesPerSecond)
{
    m_up.setRate(uploadBytesPerSecond);
    m_down.setRate(downloadBytesPerSecond);
}

bool NetworkThrottle::waitUntil(TokenBucket::Clock::time_point until, const std::atomic<bool>* cancel)
{
    while (TokenBucket::Clock::now() < until) {
        if (cancel && cancel->load())
            return false;
        std::this_thread::sleep_for(
            std::min<TokenBucket::Clock::duration>(until - TokenBucket::Clock::now(), std::chrono::milliseconds(50)));
    }
    return true;
}

bool NetworkThrottle::pass(Direction direction, uint64_t bytes, const std::atomic<bool>* cancel)
{
    m_total.fetch_add(bytes);
    const auto now = TokenBucket::Clock::now();
    return waitUntil(now + bucket(direction).take(bytes, now), cancel);
}

bool NetworkThrottle::reserve(Direction direction, uint64_t bytes, const std::atomic<bool>* cancel)
{
    const auto now = TokenBucket::Clock::now();
    if (waitUntil(now + bucket(direction).take(bytes, now), cancel))
        return true;
    bucket(direction).giveBack(bytes);
    return false;
}

void NetworkThrottle::settle(Direction direction, uint64_t reserved, uint64_t moved)
{
    m_total.fetch_add(moved);
    if (moved < reserved)
        bucket(direction).giveBack(reserved - moved);
    else if (moved > reserved)
        (void)bucket(direction).take(moved - reserved, TokenBucket::Clock::now()); // the next transfer waits
}

void NetworkThrottle::charge(Direction direction, uint64_t bytes)
{
    m_total.fetch_add(bytes);
    (void)bucket(direction).take(bytes, TokenBucket::Clock::now()); // the next transfer waits
}

} // namespace crowdtrain::limits
