#pragma once

// The status map (docs/protocol.md 12.2, "The status map") and its state in
// plain words, from a copy of what the daemon knows (StatusInputs, taken by
// JoinedProject under its lock), so that wording and locking are apart.
// Pure functions; thread-safe.

#include "net/control/control_names.h"
#include "net/control/value.h"
#include "net/limits/policy.h"
#include "net/volunteer/agent.h"

#include <optional>
#include <string>

namespace crowdtrain::daemon {

struct StatusInputs {
    std::string joinedHub; // a hub link, "demo", or ""
    std::string joinedProject;
    bool userPaused = false;
    int64_t snoozeUntilMs = 0;
    bool generating = false; // text generation holds training
    limits::Decision decision; // the limits now
    control::Value limitsReport; // LimitsMonitor::report
    std::optional<double> gpuTemperatureC;
    double measuredBusy = 0;
    std::string device; // the setting
    std::optional<volunteer::AgentSummary> summary; // with a runner
    bool runnerStopped = false; // the agent gave up
    std::optional<Error> failure; // why
    std::string coreAdvice; // what to install for this machine's GPU ("" when nothing)
};

// The state, and `why` in plain words ("" when nothing to add).
control::DaemonState stateOf(const StatusInputs& in, std::string& why);
// `state`, or `state: why`: what the `state` event follows.
std::string stateText(const StatusInputs& in);
control::Value statusValue(const StatusInputs& in, const std::string& publicKey, control::Value notices);
// One row of machine_history (with a runner only).
control::Value machineRow(const StatusInputs& in);

} // namespace crowdtrain::daemon
