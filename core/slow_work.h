#pragma once

// A piece of a loop's work that must stay short: one that took longer than
// its bound is named on stderr when it ends ("the loop was busy 549 ms (38
// ms of it on the CPU) with a submit request"), so that a host sees what
// held the loop, and whether it worked or waited (a disk, other programs
// holding the CPU).

#include <chrono>
#include <cstdio>
#include <string>
#include <time.h>
#include <utility>

namespace crowdtrain::core {

class SlowWork {
public:
    explicit SlowWork(std::string what, std::chrono::milliseconds bound = std::chrono::milliseconds(250))
        : m_what(std::move(what))
        , m_bound(bound)
    { }
    SlowWork(const SlowWork&) = delete;
    SlowWork& operator=(const SlowWork&) = delete;
    ~SlowWork()
    {
        const auto took = std::chrono::steady_clock::now() - m_started;
        if (took >= m_bound)
            std::fprintf(stderr, "the loop was busy %lld ms (%.0f ms of it on the CPU) with %s\n",
                static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()),
                (threadCpuSeconds() - m_cpuStarted) * 1e3, m_what.c_str());
    }

private:
    static double threadCpuSeconds()
    {
        timespec now{};
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
        return double(now.tv_sec) + double(now.tv_nsec) * 1e-9;
    }

    std::string m_what;
    std::chrono::milliseconds m_bound;
    std::chrono::steady_clock::time_point m_started = std::chrono::steady_clock::now();
    double m_cpuStarted = threadCpuSeconds();
};

} // namespace crowdtrain::core
