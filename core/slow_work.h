#pragma once

// A piece of a loop's work that must stay short: one that took longer than
// its bound is named on stderr when it ends ("the loop was busy 549 ms (38
// ms of it on the CPU) with a request of type submit"), so that a host sees what
// held the loop, and whether it worked or waited (a disk, other programs
// holding the CPU). The bound defaults to 250 ms; CROWDTRAIN_SLOW_WORK_MS
// sets another for the whole process (a bench looking for shorter stalls).
//
// Inside it, SlowPart names the steps worth telling apart; a slow piece
// lists them with their times ("...: inspecting the upload 301 ms (290 ms
// CPU), the copy check 2 ms (2 ms CPU)"), so that the line says which step
// to fix. Parts cost two clock reads each and nothing is formatted unless the
// whole was slow.

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
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
        , m_outer(current())
    {
        current() = this;
    }
    SlowWork(const SlowWork&) = delete;
    SlowWork& operator=(const SlowWork&) = delete;
    ~SlowWork()
    {
        current() = m_outer;
        const auto took = std::chrono::steady_clock::now() - m_started;
        if (took < bound())
            return;
        std::string parts;
        for (std::size_t i = 0; i < m_partCount; ++i) {
            char text[64];
            std::snprintf(text, sizeof text, " %.0f ms (%.0f ms CPU)", m_parts[i].seconds * 1e3, m_parts[i].cpu * 1e3);
            parts += (i == 0 ? ": " : ", ") + std::string(m_parts[i].name) + text;
        }
        std::fprintf(stderr, "the loop was busy %lld ms (%.0f ms of it on the CPU) with %.*s%.*s%s\n",
            static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()),
            (threadCpuSeconds() - m_cpuStarted) * 1e3, int(m_what.size()), m_what.data(), int(m_detail.size()),
            m_detail.data(), parts.c_str());
    }

    // The SlowWork this thread is inside, or null.
    static SlowWork*& current()
    {
        thread_local SlowWork* inside = nullptr;
        return inside;
    }

    static double threadCpuSeconds()
    {
        timespec now{};
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
        return double(now.tv_sec) + double(now.tv_nsec) * 1e-9;
    }

    // A part's times, added to the line if this piece turns out slow; parts
    // of one name add up, and past the eighth name the rest are not listed.
    void addPart(std::string_view name, double seconds, double cpu)
    {
        for (std::size_t i = 0; i < m_partCount; ++i)
            if (m_parts[i].name == name) {
                m_parts[i].seconds += seconds;
                m_parts[i].cpu += cpu;
                return;
            }
        if (m_partCount < m_parts.size())
            m_parts[m_partCount++] = {name, seconds, cpu};
    }

private:
    struct Part {
        std::string_view name;
        double seconds = 0, cpu = 0;
    };

    static std::chrono::milliseconds bound()
    {
        static const std::chrono::milliseconds value = [] {
            const char* set = std::getenv("CROWDTRAIN_SLOW_WORK_MS");
            const long ms = set ? std::strtol(set, nullptr, 10) : 0;
            return std::chrono::milliseconds(ms > 0 ? ms : 250);
        }();
        return value;
    }

    std::string_view m_what;
    std::string_view m_detail;
    SlowWork* m_outer;
    std::array<Part, 8> m_parts{};
    std::size_t m_partCount = 0;
    std::chrono::steady_clock::time_point m_started = std::chrono::steady_clock::now();
    double m_cpuStarted = threadCpuSeconds();
};

// A step of the SlowWork running on this thread (none: it does nothing).
// `name` must outlive the SlowWork (a literal).
class SlowPart {
public:
    explicit SlowPart(std::string_view name)
        : m_name(name)
        , m_whole(SlowWork::current())
    {
        if (m_whole) {
            m_started = std::chrono::steady_clock::now();
            m_cpuStarted = SlowWork::threadCpuSeconds();
        }
    }
    SlowPart(const SlowPart&) = delete;
    SlowPart& operator=(const SlowPart&) = delete;
    ~SlowPart()
    {
        if (m_whole)
            m_whole->addPart(m_name,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - m_started).count(),
                SlowWork::threadCpuSeconds() - m_cpuStarted);
    }

private:
    std::string_view m_name;
    SlowWork* m_whole;
    std::chrono::steady_clock::time_point m_started;
    double m_cpuStarted = 0;
};

} // namespace crowdtrain::core
