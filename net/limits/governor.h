#pragma once

// Holds a target share of wall time busy by resting between training steps:
// a controller over a stated window, not an on/off switch.
//
// After each step the caller reports how long the device was busy (wall
// clock around the step on CPU; the device's own time on a GPU) and when
// the step ended. The governor keeps the steps that started within the last
// `window` and answers with the rest that makes
//     busy(steps kept) / (now + rest - start of the oldest kept step) == target.
// Time between steps that is not rest (heartbeats, waiting for data) counts
// as idle, so the rest shrinks by it; a step longer than usual makes the next
// rest longer. With steady steps of s seconds the answer is s (1 - t) / t,
// so the share is exact, and a target change takes effect within a window.
// A gap longer than the window (a pause, a round change) starts afresh
// rather than letting the device catch up at full speed.
//
// Not thread-safe: one training thread reports steps; others read through
// the owner's lock.

#include <chrono>
#include <deque>

namespace crowdtrain::limits {

class BusyGovernor {
public:
    using Clock = std::chrono::steady_clock;
    using Duration = std::chrono::duration<double>; // seconds

    explicit BusyGovernor(Duration window = std::chrono::seconds(20));

    // The share of wall time to keep busy, clamped to [0.01, 1].
    void setTarget(double share);
    double target() const { return m_target; }
    Duration window() const { return m_window; }

    // A step that kept the device busy for `busy` and ended at `end`;
    // returns how long to rest before the next step (zero at target 1).
    Duration afterStep(Duration busy, Clock::time_point end);

    // The busy share over the steps kept, up to `now` (0 with no steps).
    double measured(Clock::time_point now) const;

    // Forgets the steps kept (after a pause).
    void reset() { m_steps.clear(); }

private:
    struct Step {
        Clock::time_point start;
        Duration busy;
    };

    Duration m_window;
    double m_target = 1.0;
    std::deque<Step> m_steps;
};

} // namespace crowdtrain::limits
