#include "net/volunteer/reporter.h"

#include <cstdarg>
#include <cstdio>

namespace crowdtrain::volunteer {

Reporter::Reporter(VolunteerAgent& agent, std::function<void(const std::string&)> log)
    : m_agent(agent)
    , m_log(std::move(log))
{ }

void Reporter::log(const char* format, ...)
{
    if (!m_log)
        return;
    char line[1024];
    va_list args;
    va_start(args, format);
    std::vsnprintf(line, sizeof line, format, args);
    va_end(args);
    m_log(line);
}

void Reporter::publish()
{
    if (m_fill)
        m_fill(m_summary);
    m_agent.publish(m_summary);
}

void Reporter::setPhase(AgentPhase phase)
{
    if (m_summary.phase == phase)
        return;
    m_summary.phase = phase;
    publish();
}

} // namespace crowdtrain::volunteer
