#include "net/daemon/log_ring.h"

namespace crowdtrain::daemon {

namespace {

constexpr std::size_t kMaxLogLines = 1'000;
constexpr std::size_t kMaxNotices = 50;

} // namespace

LogRing::LogRing(std::function<void(const std::string&)> sink)
    : m_sink(std::move(sink))
{ }

void LogRing::log(const std::string& line)
{
    {
        std::lock_guard lock(m_mutex);
        m_lines.push_back(line);
        if (m_lines.size() > kMaxLogLines)
            m_lines.pop_front();
    }
    if (m_sink)
        m_sink(line);
}

void LogRing::notice(const std::string& line)
{
    {
        std::lock_guard lock(m_mutex);
        m_notices.push_back(line);
        if (m_notices.size() > kMaxNotices)
            m_notices.pop_front();
    }
    log(line);
}

control::Value LogRing::lines() const
{
    control::Value lines = control::Value::array();
    {
        std::lock_guard lock(m_mutex);
        for (const std::string& line : m_lines)
            lines.push(line);
    }
    control::Value v = control::Value::map();
    v.set("lines", std::move(lines));
    return v;
}

control::Value LogRing::notices() const
{
    control::Value notices = control::Value::array();
    std::lock_guard lock(m_mutex);
    for (const std::string& n : m_notices)
        notices.push(n);
    return notices;
}

} // namespace crowdtrain::daemon
