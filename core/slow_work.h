#pragma once

// A piece of a loop's work that must stay short: one that took longer than
// its bound is named on stderr when it ends ("the loop was busy 549 ms (38
// ms of it on the CPU) with a request of type submit"), so that a host sees what
// held the loop, and whether it worked or waited (a disk, other programs
// holding the CPU). The bound defaults to 250 ms; CROWDTRAIN_SLOW_WORK_MS
// sets another for the whole process (a bench looking for shorter stalls).

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <time.h>

namespace crowdtrain::core {

class SlowWork {
public:
    // Named "<what><detail>" when slow; nothing is formatted otherwise (the
    // loop makes one for every request). Both must outlive the object.
    explicit SlowWork(std::string_view what, std::string_view detail = {})
        : m_what(what)
        , m_detail(detail)
    { }
    SlowWork(const SlowWork&) = delete;
    SlowWork& operator=(const SlowWork&) = delete;
    ~SlowWork()
    {
        const auto took = std::chrono::steady_clock::now() - m_started;
        if (took >= bound())
            std::fprintf(stderr, "the loop was busy %lld ms (%.0f ms of it on the CPU) with %.*s%.*s\n",
                static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()),
                (threadCpuSeconds() - m_cpuStarted) * 1e3, int(m_what.size()), m_what.data(), int(m_detail.size()),
                m_detail.data());
    }

private:
    static std::chrono::milliseconds bound()
    {
        static const std::chrono::milliseconds value = [] {
            const char* set = std::getenv("CROWDTRAIN_SLOW_WORK_MS");
            const long ms = set ? std::strtol(set, nullptr, 10) : 0;
            return std::chrono::milliseconds(ms > 0 ? ms : 250);
        }();
        return value;
    }
    static double threadCpuSeconds()
    {
        timespec now{};
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
        return double(now.tv_sec) + double(now.tv_nsec) * 1e-9;
    }

    std::string_view m_what;
    std::string_view m_detail;
    std::chrono::steady_clock::time_point m_started = std::chrono::steady_clock::now();
    double m_cpuStarted = threadCpuSeconds();
};

} // namespace crowdtrain::core
