#include "net/daemon/status_words.h"

#include "net/daemon/hub_directory.h"

namespace crowdtrain::daemon {

using control::DaemonState;
using control::Value;
using volunteer::AgentPhase;

DaemonState stateOf(const StatusInputs& in, std::string& why)
{
    why.clear();
    if (in.joinedProject.empty()) {
        why = "no project joined";
        return DaemonState::Idle;
    }
    if (in.snoozeUntilMs > unixNowMs()) {
        why = "snoozed";
        return DaemonState::Paused;
    }
    if (in.userPaused) {
        why = "paused by you";
        return DaemonState::Paused;
    }
    if (in.generating) {
        why = "generating text from a checkpoint";
        return DaemonState::Paused;
    }
    if (!in.decision.run) {
        why = in.decision.limit;
        return DaemonState::Paused;
    }
    if (!in.summary)
        return DaemonState::Starting;
    if (in.runnerStopped) {
        why = in.failure ? in.failure->message : "stopped";
        return DaemonState::Stopped;
    }
    switch (in.summary->phase) {
    case AgentPhase::Training:
    case AgentPhase::Uploading:
        why = in.decision.limit; // a busy share under 100%, or ""
        return DaemonState::Training;
    case AgentPhase::Waiting:
        return DaemonState::Waiting;
    case AgentPhase::Syncing:
        return DaemonState::Syncing;
    case AgentPhase::Offline:
        why = in.summary->lastError;
        return DaemonState::Offline;
    case AgentPhase::Starting:
    case AgentPhase::Connecting:
    case AgentPhase::Stopped: // the runner says so first (runnerStopped)
        break;
    }
    return DaemonState::Connecting;
}

std::string stateText(const StatusInputs& in)
{
    std::string why;
    const std::string state(control::wireName(stateOf(in, why)));
    return why.empty() ? state : state + ": " + why;
}

Value statusValue(const StatusInputs& in, const std::string& publicKey, Value notices)
{
    std::string why;
    const std::string state(control::wireName(stateOf(in, why)));
    Value v = Value::map();
    v.set("state", state).set("reason", why);
    v.set("text", why.empty() ? state : state + ": " + why);
    v.set("hub", in.joinedHub).set("project", in.joinedProject);
    v.set("paused", in.userPaused).set("snooze_until_ms", in.snoozeUntilMs);
    v.set("device", in.device).set("public_key", publicKey);
    Value limits = in.limitsReport;
    const auto& summary = in.summary;
    if (summary && summary->microBatch > 0)
        limits.set("micro_batch", summary->microBatch);
    v.set("limit", in.decision.limit).set("limit_code", control::wireName(in.decision.code));
    v.set("limits", std::move(limits));
    if (summary) {
        v.set("phase", volunteer::wireName(summary->phase)).set("round", summary->round).set("task", summary->taskId);
        v.set("step", summary->step).set("steps", summary->steps).set("loss", summary->loss);
        v.set("tokens_per_second", summary->tokensPerSecond).set("version", summary->version);
        v.set("tasks", summary->tasks).set("accepted", summary->accepted).set("rejected", summary->rejected);
        v.set("tokens", summary->tokens).set("busy_share", in.measuredBusy);
        v.set("effective_tokens_per_second", in.measuredBusy * summary->tokensPerSecond);
        v.set("last_error", summary->lastError).set("piece_fetches", summary->pieceFetches);
        if (!summary->deviceName.empty())
            v.set("device_in_use", summary->deviceName);
        if (!summary->parallelMode.empty())
            v.set("parallel_mode", summary->parallelMode);
        if (!summary->memoryPlan.empty())
            v.set("memory_plan", summary->memoryPlan);
        // The training core: its family ("cpu", "cuda") once one has
        // started, and whether one runs now (none while the device is given back).
        if (!summary->coreFamily.empty())
            v.set("core", summary->coreFamily).set("core_runtime", summary->coreRuntime);
        v.set("core_running", summary->coreRunning);
        if (!summary->cudaRefusal.empty())
            v.set("cuda_refusal", summary->cudaRefusal);
    }
    v.set("core_advice", in.coreAdvice);
    v.set("notices", std::move(notices));
    return v;
}

Value machineRow(const StatusInputs& in)
{
    // The busy share over the governor's window and the tokens/s it gives
    // (the steps' own rate times that share), so the curve is smooth across
    // step and task boundaries.
    const double busy = in.measuredBusy;
    const double rate = in.summary ? in.summary->tokensPerSecond : 0.0;
    Value row = Value::map();
    row.set("time_ms", unixNowMs());
    row.set("tokens_per_second", busy * rate);
    row.set("busy_share", busy);
    row.set("step_tokens_per_second", in.summary && in.summary->phase == AgentPhase::Training ? rate : 0.0);
    if (in.gpuTemperatureC)
        row.set("gpu_temperature_c", *in.gpuTemperatureC);
    return row;
}

} // namespace crowdtrain::daemon
