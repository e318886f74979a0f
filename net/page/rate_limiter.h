#pragma once

// Requests per client address for the public page: a token bucket per
// address (a burst, then a steady rate), in a table of bounded size (the
// idlest addresses are forgotten first). Thread-safe.

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

namespace crowdtrain::page {

class RateLimiter {
public:
    RateLimiter(double perSecond, double burst, std::size_t maxClients = 10000);

    // Whether `client` may make a request at `now` (and counts it).
    bool allow(const std::string& client, std::chrono::steady_clock::time_point now);

private:
    struct Bucket {
        double tokens = 0;
        std::chrono::steady_clock::time_point at;
    };
    void forgetIdlest(std::chrono::steady_clock::time_point now);

    double m_perSecond;
    double m_burst;
    std::size_t m_maxClients;
    std::mutex m_mutex;
    std::unordered_map<std::string, Bucket> m_buckets;
};

} // namespace crowdtrain::page
