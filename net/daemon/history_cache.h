#pragma once

// The daemon's two histories, answered from memory: the joined project's
// metric rows as the hub gave them (the `metrics` request and event; at
// most 100,000 rows) and this machine's samples, one per status poll (the
// `machine_history` request; the last 3,600). Thread-safe.

#include "net/control/value.h"
#include "net/wire/messages.h"

#include <deque>
#include <mutex>
#include <vector>

namespace crowdtrain::daemon {

class HistoryCache {
public:
    // A runner started: the metric rows start again from round 0.
    void resetMetrics();
    // The first round not fetched yet.
    uint64_t nextMetricRound() const;
    // Appends the hub's rows; returns them as the `metrics` event sends them.
    control::Value addMetrics(const std::vector<net::MetricRow>& rows);
    // Rows of round >= `since`.
    control::Value metrics(uint64_t since) const;

    void addMachineRow(control::Value row);
    control::Value machineRows() const; // {rows: [...]}

private:
    mutable std::mutex m_mutex; // a leaf lock
    std::deque<control::Value> m_metricRows;
    uint64_t m_nextMetricRound = 0;
    std::deque<control::Value> m_machineRows;
};

} // namespace crowdtrain::daemon
