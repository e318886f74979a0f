#include "net/page/rate_limiter.h"

#include <algorithm>

namespace crowdtrain::page {

RateLimiter::RateLimiter(double perSecond, double burst, std::size_t maxClients)
    : m_perSecond(perSecond)
    , m_burst(std::max(1.0, burst))
    , m_maxClients(std::max<std::size_t>(1, maxClients))
{ }

bool RateLimiter::allow(const std::string& client, std::chrono::steady_clock::time_point now)
{
    std::lock_guard lock(m_mutex);
    auto it = m_buckets.find(client);
    if (it == m_buckets.end()) {
        if (m_buckets.size() >= m_maxClients)
            forgetIdlest(now);
        it = m_buckets.emplace(client, Bucket{m_burst, now}).first;
    }
    Bucket& b = it->second;
    const double seconds = std::chrono::duration<double>(now - b.at).count();
    b.tokens = std::min(m_burst, b.tokens + std::max(0.0, seconds) * m_perSecond);
    b.at = now;
    if (b.tokens < 1.0)
        return false;
    b.tokens -= 1.0;
    return true;
}

// Buckets full again (idle for burst / rate seconds) hold nothing worth
// keeping; when none is, the table is cleared, which only forgives.
void RateLimiter::forgetIdlest(std::chrono::steady_clock::time_point now)
{
    const auto full = std::chrono::duration<double>(m_burst / std::max(m_perSecond, 1e-9));
    std::erase_if(m_buckets, [&](const auto& entry) { return now - entry.second.at >= full; });
    if (m_buckets.size() >= m_maxClients)
        m_buckets.clear();
}

} // namespace crowdtrain::page
