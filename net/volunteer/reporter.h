#pragma once

// What the agent tells the world: its log lines and the AgentSummary that
// VolunteerAgent::summary() hands to other threads. One Reporter per run(),
// owned by the AgentLoop and used by its collaborators on run()'s thread;
// only publish() crosses threads (through VolunteerAgent's mutex).

#include "net/volunteer/agent.h"

#include <functional>
#include <string>

namespace crowdtrain::volunteer {

class Reporter {
public:
    using Fill = std::function<void(AgentSummary&)>;

    Reporter(VolunteerAgent& agent, std::function<void(const std::string&)> log);

    void log(const char* format, ...) __attribute__((format(printf, 2, 3)));

    // The summary as this run keeps it; publish() makes changes visible.
    AgentSummary& summary() { return m_summary; }
    const AgentSummary& summary() const { return m_summary; }

    // Fills in what other owners know (wall time, traffic, version) just
    // before each publish.
    void setFill(Fill fill) { m_fill = std::move(fill); }
    void publish();
    void setPhase(AgentPhase phase);

private:
    VolunteerAgent& m_agent;
    std::function<void(const std::string&)> m_log;
    Fill m_fill;
    AgentSummary m_summary;
};

} // namespace crowdtrain::volunteer
