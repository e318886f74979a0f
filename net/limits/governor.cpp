#include "net/limits/governor.h"

#include <algorithm>

namespace crowdtrain::limits {

BusyGovernor::BusyGovernor(Duration window)
    : m_window(window)
{ }

void BusyGovernor::setTarget(double share)
{
    m_target = std::clamp(share, 0.01, 1.0);
}

BusyGovernor::Duration BusyGovernor::afterStep(Duration busy, Clock::time_point end)
{
    busy = std::max(busy, Duration::zero());
    const auto start = end - std::chrono::duration_cast<Clock::duration>(busy);
    if (!m_steps.empty()) {
        const Step& last = m_steps.back();
        const auto lastEnd = last.start + std::chrono::duration_cast<Clock::duration>(last.busy);
        if (start - lastEnd > m_window)
            m_steps.clear();
    }
    m_steps.push_back({start, busy});
    while (m_steps.size() > 1 && m_steps.front().start < end - m_window)
        m_steps.pop_front();
    if (m_target >= 1.0)
        return Duration::zero();
    Duration busyKept = Duration::zero();
    for (const Step& step : m_steps)
        busyKept += step.busy;
    const Duration wall = end - m_steps.front().start;
    return std::max(Duration::zero(), busyKept / m_target - wall);
}

double BusyGovernor::measured(Clock::time_point now) const
{
    if (m_steps.empty())
        return 0.0;
    Duration busyKept = Duration::zero();
    for (const Step& step : m_steps)
        busyKept += step.busy;
    const Duration wall = now - m_steps.front().start;
    return wall.count() > 0 ? std::min(1.0, busyKept / wall) : 1.0;
}

} // namespace crowdtrain::limits
