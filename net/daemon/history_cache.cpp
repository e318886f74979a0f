#include "net/daemon/history_cache.h"

namespace crowdtrain::daemon {

namespace {

using control::Value;

constexpr std::size_t kMaxMetricRows = 100'000;
constexpr std::size_t kMaxMachineRows = 3'600; // an hour of one-second samples

Value metricValue(const net::MetricRow& row)
{
    Value v = Value::map();
    v.set("round", row.round).set("tokens", row.tokens);
    v.set("train_loss", row.trainLoss ? Value(*row.trainLoss) : Value());
    v.set("val_loss", row.valLoss ? Value(*row.valLoss) : Value());
    v.set("volunteers", row.volunteers).set("time_ms", row.timeMs);
    return v;
}

} // namespace

void HistoryCache::resetMetrics()
{
    std::lock_guard lock(m_mutex);
    m_metricRows.clear();
    m_nextMetricRound = 0;
}

uint64_t HistoryCache::nextMetricRound() const
{
    std::lock_guard lock(m_mutex);
    return m_nextMetricRound;
}

Value HistoryCache::addMetrics(const std::vector<net::MetricRow>& rows)
{
    Value added = Value::array();
    std::lock_guard lock(m_mutex);
    for (const net::MetricRow& row : rows) {
        m_metricRows.push_back(metricValue(row));
        added.push(metricValue(row));
        m_nextMetricRound = row.round + 1;
    }
    while (m_metricRows.size() > kMaxMetricRows)
        m_metricRows.pop_front();
    return added;
}

Value HistoryCache::metrics(uint64_t since) const
{
    Value rows = Value::array();
    std::lock_guard lock(m_mutex);
    for (const Value& row : m_metricRows)
        if (row["round"].toUInt() >= since)
            rows.push(row);
    return rows;
}

void HistoryCache::addMachineRow(Value row)
{
    std::lock_guard lock(m_mutex);
    m_machineRows.push_back(std::move(row));
    if (m_machineRows.size() > kMaxMachineRows)
        m_machineRows.pop_front();
}

Value HistoryCache::machineRows() const
{
    Value rows = Value::array();
    {
        std::lock_guard lock(m_mutex);
        for (const Value& row : m_machineRows)
            rows.push(row);
    }
    Value v = Value::map();
    v.set("rows", std::move(rows));
    return v;
}

} // namespace crowdtrain::daemon
