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

void NetworkThrottle::setRates(uint64_t uploadBytesPerSecond, uint64_t downloadBytesPerSecond)
{
    m_up.setRate(uploadBytesPerSecond);
    m_down.setRate(downloadBytesPerSecond);
}

bool NetworkThrottle::pass(Direction direction, uint64_t bytes, const std::atomic<bool>* cancel)
{
    m_total.fetch_add(bytes);
    TokenBucket& bucket = direction == Direction::Up ? m_up : m_down;
    const auto until = TokenBucket::Clock::now() + bucket.take(bytes, TokenBucket::Clock::now());
    while (TokenBucket::Clock::now() < until) {
        if (cancel && cancel->load())
            return false;
        std::this_thread::sleep_for(
            std::min<TokenBucket::Clock::duration>(until - TokenBucket::Clock::now(), std::chrono::milliseconds(50)));
    }
    return true;
}

} // namespace crowdtrain::limits
