#pragma once

// Bytes of training state (parameters, gradients, optimizer moments) a rank
// holds, counted where the parallel code allocates and frees them, with the
// peak. Activations and the process groups' own buffers are not counted.

#include <algorithm>
#include <array>
#include <cstdint>

namespace crowdtrain::engine::parallel {

class MemoryMeter {
public:
    enum Kind { Parameters = 0, Gradients = 1, Optimizer = 2 };

    void add(Kind kind, int64_t bytes)
    {
        m_now[kind] += bytes;
        const int64_t total = now();
        if (total > m_peak) {
            m_peak = total;
            m_atPeak = m_now;
        }
    }
    void sub(Kind kind, int64_t bytes) { m_now[kind] -= bytes; }
    int64_t now() const { return m_now[0] + m_now[1] + m_now[2]; }
    int64_t now(Kind kind) const { return m_now[kind]; }
    int64_t peak() const { return m_peak; }
    // Each kind's bytes at the moment of the peak.
    int64_t atPeak(Kind kind) const { return m_atPeak[kind]; }

private:
    std::array<int64_t, 3> m_now{};
    std::array<int64_t, 3> m_atPeak{};
    int64_t m_peak = 0;
};

} // namespace crowdtrain::engine::parallel
