#include "net/daemon/joined_project.h"

#include "net/core_link/core_process.h"

#include "net/daemon/request_fields.h"
#include "net/limits/machine.h"

namespace crowdtrain::daemon {

namespace {

using control::Value;
namespace setting = control::setting;

} // namespace

JoinedProject::JoinedProject(JoinedProjectParts parts)
    : m_parts(std::move(parts))
    , m_stateFile(m_parts.dataDir / "daemon.json")
{ }

JoinedProject::~JoinedProject()
{
    stopAgent();
}

void JoinedProject::stopAgent()
{
    std::unique_ptr<ProjectRunner> runner;
    {
        std::lock_guard lock(m_mutex);
        runner = std::move(m_runner);
    }
    runner.reset(); // stops the agent at a step boundary
}

bool JoinedProject::load()
{
    // What this daemon was doing when it last stopped.
    std::string why;
    const auto state = m_stateFile.load(why);
    if (!why.empty())
        m_parts.log.notice(why + "; starting with no project joined");
    if (!state)
        return false;
    for (const std::string& link : state->hubs)
        if (auto hub = parseHubLink(link))
            m_parts.hubs.follow(*hub);
    std::lock_guard lock(m_mutex);
    m_joinedHub = state->joinedHub;
    m_joinedProject = state->joinedProject;
    m_userPaused = state->paused;
    m_snoozeUntilMs = state->snoozeUntilMs;
    return !m_joinedProject.empty();
}

SavedState JoinedProject::savedLocked() const
{
    SavedState state;
    for (const HubEntry& entry : m_parts.hubs.entries())
        if (entry.label != kDemoLabel)
            state.hubs.push_back(entry.link);
    state.joinedHub = m_joinedHub;
    state.joinedProject = m_joinedProject;
    state.paused = m_userPaused;
    state.snoozeUntilMs = m_snoozeUntilMs;
    return state;
}

Status JoinedProject::persist()
{
    DaemonStateFile::Snapshot state;
    {
        std::lock_guard lock(m_mutex);
        state = m_stateFile.snapshot(savedLocked());
    }
    return m_stateFile.write(state);
}

Status JoinedProject::startRunnerLocked(const std::string& hubText, const HubLink& hub, const std::string& project)
{
    const Settings settings = m_parts.settings.get();
    volunteer::AgentOptions options;
    options.dataDir = m_parts.dataDir;
    options.displayName = settings.get(setting::kDisplayName);
    const std::string device = settings.get(setting::kDevice);
    options.device = device == setting::kDeviceAuto ? std::string(setting::kDeviceAuto) : device;
    options.threads = int(settings.get(setting::kCpuThreads));
    options.pieceCacheBytes = uint64_t(settings.get(setting::kPieceCacheBytes));
    if (device == setting::kDeviceCuda && !LimitsMonitor::cudaDevice(settings).empty())
        options.device = LimitsMonitor::cudaDevice(settings);
    if (device != setting::kDeviceCpu)
        options.devices = m_parts.limits.cudaDevices(settings);
    options.network = m_parts.limits.throttle();
    if (device != setting::kDeviceCpu)
        std::tie(options.gpuMemoryTotalBytes, options.gpuMemoryBudgetBytes) = m_parts.limits.gpuMemory(settings);
    options.hostMemoryBytes = limits::availableHostMemory().value_or(0);
    // The CUDA core when the settings ask for CUDA, or allow a GPU and NVML
    // sees one (asked for and refused: status says why, training goes on
    // with the CPU core).
    options.tryCudaCore = device == setting::kDeviceCuda
        || (device != setting::kDeviceCpu && m_parts.limits.gpuTemperatureC().has_value());
    // What the project is told this machine trains on: its GPUs when the
    // CUDA core is installed to use them, else the CPU.
    std::error_code ec;
    const std::string gpus = m_parts.limits.gpuLabel(settings);
    options.deviceLabel
        = options.tryCudaCore && !gpus.empty() && std::filesystem::exists(corelink::defaultCudaCoreBinary(), ec)
        ? gpus
        : "CPU";
    options.log = [this](const std::string& line) { m_parts.log.log(line); };
    options.swarm = m_parts.swarm;
    options.swarmSeeding = m_parts.swarmSeeding;
    ProjectRunner::Target target{hub, hubText, project};
    m_runner = std::make_unique<ProjectRunner>(std::move(target), std::move(options), m_gate);
    m_parts.history.resetMetrics();
    return Status::success();
}

void JoinedProject::refreshPausedLocked()
{
    const limits::Decision limit = m_parts.limits.decision();
    const int64_t now = unixNowMs();
    const bool snoozed = m_snoozeUntilMs > now;
    const bool paused = m_userPaused || snoozed || m_generating || !limit.run;
    m_gate.setBusyTarget(limit.run ? limit.busyTarget : 1.0);
    m_gate.setPaused(paused);
    m_pausedSinceMs = !paused ? 0 : m_pausedSinceMs ? m_pausedSinceMs : now;
    if (!m_runner)
        return;
    // The training core gives its device back (it exits) when the pause is
    // for something that wants the GPU's memory, or has lasted a while.
    std::string why;
    if (snoozed)
        why = "snoozed";
    else if (m_generating)
        why = "generating text";
    else if (!limit.run
        && (limit.code == control::LimitCode::Schedule || limit.code == control::LimitCode::GpuBusy
            || limit.code == control::LimitCode::Program))
        why = limit.limit;
    else if (paused && now - m_pausedSinceMs >= kReleaseDeviceAfterPauseMs)
        why = "paused for " + std::to_string(kReleaseDeviceAfterPauseMs / 1000) + " s";
    m_runner->releaseDevice(!why.empty(), why);
}

Status JoinedProject::join(const std::string& hubText, const std::string& project)
{
    if (std::string why = nameProblem("project", project); !why.empty())
        return badRequest(why);
    std::string link = kDemoLabel;
    if (hubText != kDemoLabel) {
        auto parsed = parseHubLink(hubText);
        if (!parsed)
            return parsed.error();
        link = formatHubLink(*parsed);
    }
    // May start the demo hub (minutes): without m_mutex, so status answers.
    auto hub = m_parts.resolver.resolve(link);
    if (!hub)
        return hub.error();
    std::unique_ptr<ProjectRunner> old;
    DaemonStateFile::Snapshot state;
    {
        std::lock_guard lock(m_mutex);
        if (link != kDemoLabel)
            m_parts.hubs.follow(*hub);
        old = std::move(m_runner);
        m_joinedHub = link;
        m_joinedProject = project;
        refreshPausedLocked();
        state = m_stateFile.snapshot(savedLocked());
    }
    const Status saved = m_stateFile.write(state);
    // The old agent stops at a step boundary; its thread is joined here,
    // not under m_mutex.
    old.reset();
    {
        std::lock_guard lock(m_mutex);
        if (m_joinedHub == link && m_joinedProject == project && !m_runner)
            if (Status s = startRunnerLocked(link, *hub, project); !s)
                return s;
    }
    if (!saved)
        return saved;
    m_parts.log.log("joined " + project + " at " + (link == kDemoLabel ? std::string("the local demo hub") : link));
    return Status::success();
}

void JoinedProject::resume()
{
    std::string hubText;
    std::string project;
    {
        std::lock_guard lock(m_mutex);
        hubText = m_joinedHub;
        project = m_joinedProject;
    }
    auto hub = m_parts.resolver.resolve(hubText);
    std::lock_guard lock(m_mutex);
    if (m_joinedHub != hubText || m_joinedProject != project || m_runner)
        return; // joined or left meanwhile
    if (!hub) {
        m_parts.log.log("cannot resume " + project + ": " + hub.error().message);
    } else if (Status s = startRunnerLocked(hubText, *hub, project); !s) {
        m_parts.log.log("cannot resume " + project + ": " + s.error().message);
    } else {
        m_parts.log.log("resumed " + project + (m_gate.paused() ? " (paused)" : ""));
    }
}

Result<Value> JoinedProject::leave()
{
    std::unique_ptr<ProjectRunner> old;
    std::string left;
    DaemonStateFile::Snapshot state;
    {
        std::lock_guard lock(m_mutex);
        if (m_joinedProject.empty())
            return Error::make(control::errc::kNotJoined, "no project is joined");
        left = m_joinedProject;
        old = std::move(m_runner);
        m_joinedHub.clear();
        m_joinedProject.clear();
        state = m_stateFile.snapshot(savedLocked());
    }
    old.reset(); // the agent stops at a step boundary, without m_mutex
    if (Status s = m_stateFile.write(state); !s)
        return s.error();
    m_parts.log.log("left " + left);
    return Value::map();
}

Result<Value> JoinedProject::pause(bool paused)
{
    DaemonStateFile::Snapshot state;
    {
        std::lock_guard lock(m_mutex);
        m_userPaused = paused;
        if (!paused)
            m_snoozeUntilMs = 0;
        refreshPausedLocked();
        state = m_stateFile.snapshot(savedLocked());
    }
    if (Status s = m_stateFile.write(state); !s)
        return s.error();
    m_parts.log.log(paused ? "paused by the volunteer" : "resumed by the volunteer");
    Value v = Value::map();
    v.set("paused", paused);
    return v;
}

Result<Value> JoinedProject::snooze(int64_t seconds)
{
    DaemonStateFile::Snapshot state;
    int64_t until = 0;
    {
        std::lock_guard lock(m_mutex);
        m_snoozeUntilMs = unixNowMs() + seconds * 1000;
        until = m_snoozeUntilMs;
        refreshPausedLocked();
        state = m_stateFile.snapshot(savedLocked());
    }
    if (Status s = m_stateFile.write(state); !s)
        return s.error();
    Value v = Value::map();
    v.set("snooze_until_ms", until);
    return v;
}

void JoinedProject::setGenerating(bool on)
{
    const bool pauses = m_parts.settings.get().get(setting::kGeneratePausesTraining);
    std::lock_guard lock(m_mutex);
    m_generating = on && pauses;
    refreshPausedLocked();
}

StatusInputs JoinedProject::tick()
{
    const Settings settings = m_parts.settings.get();
    std::optional<DaemonStateFile::Snapshot> state;
    std::string change;
    StatusInputs inputs;
    // The machine is read (NVML, /proc, the usage file written and synced)
    // without m_mutex: status answers from what the last reading published.
    const bool ranBefore = m_parts.limits.decision().run;
    m_parts.limits.evaluate(settings, std::chrono::system_clock::now());
    {
        std::lock_guard lock(m_mutex);
        if (m_snoozeUntilMs && m_snoozeUntilMs <= unixNowMs()) {
            m_snoozeUntilMs = 0;
            state = m_stateFile.snapshot(savedLocked());
        }
        // The log says when limits stop or release training (the status
        // says which limit acts at every moment).
        refreshPausedLocked();
        if (const bool runs = m_parts.limits.decision().run; runs != ranBefore && !m_joinedProject.empty())
            change = runs ? std::string("limits allow training again")
                          : "limits pause training: " + m_parts.limits.decision().limit;
        inputs = inputsLocked();
    }
    if (state)
        (void)m_stateFile.write(*state);
    if (!change.empty())
        m_parts.log.log(change);
    return inputs;
}

StatusInputs JoinedProject::inputsLocked() const
{
    StatusInputs in;
    in.joinedHub = m_joinedHub;
    in.joinedProject = m_joinedProject;
    in.userPaused = m_userPaused;
    in.snoozeUntilMs = m_snoozeUntilMs;
    in.generating = m_generating;
    in.decision = m_parts.limits.decision();
    in.gpuTemperatureC = m_parts.limits.gpuTemperatureC();
    in.measuredBusy = m_gate.measuredBusy();
    // An NVIDIA GPU and no CUDA core: training runs on the CPU until the
    // volunteer adds it.
    std::error_code ec;
    if (in.gpuTemperatureC && !std::filesystem::exists(corelink::defaultCudaCoreBinary(), ec))
        in.coreAdvice = std::string("This computer has an NVIDIA GPU, but Crowdtrain's CUDA core is not installed, "
                                    "so it trains on the CPU. Add it with: ")
            + corelink::kCudaCoreInstall;
    if (m_runner) {
        in.summary = m_runner->summary();
        in.runnerStopped = !m_runner->running();
        if (in.runnerStopped)
            in.failure = m_runner->failure();
    }
    return in;
}

StatusInputs JoinedProject::inputs() const
{
    const Settings settings = m_parts.settings.get();
    std::lock_guard lock(m_mutex);
    StatusInputs in = inputsLocked();
    in.device = settings.get(setting::kDevice);
    in.limitsReport = m_parts.limits.report(m_gate.measuredBusy(), settings);
    return in;
}

JoinedProject::Joined JoinedProject::joined() const
{
    std::lock_guard lock(m_mutex);
    Joined j{m_joinedHub, m_joinedProject, std::nullopt};
    if (m_runner)
        j.runner = m_runner->target();
    return j;
}

} // namespace crowdtrain::daemon
