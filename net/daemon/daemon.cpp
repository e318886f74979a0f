#include "net/daemon/daemon.h"

#include "net/control/control_names.h"
#include "net/control/control_paths.h"
#include "net/daemon/request_fields.h"
#include "net/daemon/state_file.h"
#include "net/transport/atomic_write.h"
#include "net/volunteer/local_store.h"
#include "net/wire/error_codes.h"
#include "net/wire/text_checks.h"

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <future>
#include <sys/file.h>
#include <unistd.h>

namespace crowdtrain::daemon {

namespace {

using json = nlohmann::json;
using control::Value;

constexpr std::size_t kMaxMetricRows = 100'000;
constexpr std::size_t kMaxMachineRows = 3'600; // an hour of one-second samples
constexpr std::size_t kMaxLogLines = 1'000;
constexpr const char* kStateFile = "daemon.json";
constexpr std::size_t kMaxNotices = 50;
constexpr std::size_t kMaxQueuedChanges = 32;
constexpr std::size_t kMaxQueuedReads = 16;

// daemon.json as stateSnapshot() writes it; "" when it is.
std::string stateProblem(const json& state)
{
    for (const std::string& why : {expectString(state, "joined_hub"), expectString(state, "joined_project"),
             expectBool(state, "paused"), expectInteger(state, "snooze_until_ms")})
        if (!why.empty())
            return why;
    if (!state.contains("hubs") || !state["hubs"].is_array())
        return "\"hubs\" is not a list";
    for (const json& link : state["hubs"])
        if (!link.is_string() || !parseHubLink(link.get<std::string>()))
            return "\"hubs\" holds something that is not a hub link";
    const std::string project = state["joined_project"].get<std::string>();
    const std::string hub = state["joined_hub"].get<std::string>();
    if (!project.empty() && !net::isProjectName(project))
        return "\"joined_project\" is not a project name";
    if (project.empty() != hub.empty() || (!hub.empty() && hub != kDemoLabel && !parseHubLink(hub)))
        return "\"joined_hub\" is not \"demo\" or a hub link";
    return "";
}

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

Daemon::Daemon(DaemonOptions options)
    : m_options(std::move(options))
{ }

Result<std::unique_ptr<Daemon>> Daemon::open(DaemonOptions options)
{
    std::unique_ptr<Daemon> daemon(new Daemon(std::move(options)));
    if (Status s = daemon->initialise(); !s)
        return s.error();
    return daemon;
}

Status Daemon::initialise()
{
    if (Status s = control::preparePrivateDir(m_options.controlDir); !s)
        return s;
    const std::filesystem::path lockFile = m_options.controlDir / "daemon.lock";
    m_lockFd = ::open(lockFile.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (m_lockFd < 0)
        return Error::make(net::errc::kIoError, lockFile.string() + ": " + std::strerror(errno));
    if (::flock(m_lockFd, LOCK_EX | LOCK_NB) != 0) {
        char pid[32] = {};
        (void)::pread(m_lockFd, pid, sizeof pid - 1, 0);
        return Error::make(control::errc::kAlreadyRunning,
            "a Crowdtrain daemon is already running for this user (pid " + std::string(pid) + ", control folder "
                + m_options.controlDir.string() + ")");
    }
    const std::string pid = std::to_string(::getpid());
    (void)::ftruncate(m_lockFd, 0);
    (void)::pwrite(m_lockFd, pid.data(), pid.size(), 0);

    std::error_code ec;
    std::filesystem::create_directories(m_options.dataDir, ec);
    if (ec)
        return Error::make(net::errc::kIoError, m_options.dataDir.string() + ": " + ec.message());
    std::string settingsNotice;
    auto settings = Settings::load(m_options.configDir / "settings.json", settingsNotice);
    if (!settings)
        return settings.error();
    m_settings = std::move(*settings);
    if (!settingsNotice.empty())
        notice(settingsNotice);
    auto identity = net::loadOrCreateKeyPair(m_options.dataDir / "identity.key");
    if (!identity)
        return identity.error();
    m_identity = *identity;
    m_context = std::make_unique<zmq::context_t>();
    m_hubs = std::make_unique<HubDirectory>(*m_context, m_identity);

    loadState();

    m_limits = std::make_unique<LimitsMonitor>(m_options.dataDir, m_options.probes);
    if (!m_limits->startNotice().empty())
        notice(m_limits->startNotice());

    CheckpointsOptions checkpoints;
    checkpoints.root = m_options.dataDir / "checkpoints";
    checkpoints.throttle = m_limits->throttle();
    checkpoints.publish = [this](std::string_view type, const Value& body) { publish(type, body); };
    checkpoints.log = [this](const std::string& line) { log(line); };
    checkpoints.notice = [this](const std::string& line) { notice(line); };
    checkpoints.resolve = [this](const std::string& hub) { return currentHub(hub); };
    checkpoints.generating = [this](bool on) {
        std::lock_guard lock(m_mutex);
        m_generating = on && m_settings.get(control::setting::kGeneratePausesTraining);
        refreshPaused();
    };
    m_checkpoints = std::make_unique<Checkpoints>(*m_hubs, std::move(checkpoints));

    m_changes = std::make_unique<WorkQueue>(kMaxQueuedChanges);
    m_reads = std::make_unique<WorkQueue>(kMaxQueuedReads);
    m_background = std::make_unique<WorkQueue>(1);
    auto server = control::ControlServer::open(m_options.controlDir,
        [this](const control::Request& request, control::Responder respond) { handle(request, std::move(respond)); });
    if (!server)
        return server.error();
    m_server = std::move(*server);

    {
        std::lock_guard lock(m_mutex);
        m_limits->evaluate(m_settings, std::chrono::system_clock::now());
        refreshPaused();
    }
    // Starting the demo hub can take minutes: the control thread answers meanwhile.
    if (!m_joinedProject.empty())
        (void)m_changes->post([this] { resumeJoined(); });
    m_poller = std::thread([this] { poll(); });
    log("daemon " + pid + " serving " + control::controlEndpoint(m_options.controlDir));
    return Status::success();
}

Daemon::~Daemon()
{
    stop();
    // The queues first: their jobs use everything below.
    m_changes.reset();
    m_reads.reset();
    m_background.reset();
    if (m_poller.joinable())
        m_poller.join();
    std::unique_ptr<ProjectRunner> runner;
    {
        std::lock_guard lock(m_mutex);
        runner = std::move(m_runner);
    }
    runner.reset(); // stops the agent at a step boundary
    m_checkpoints.reset();
    m_server.reset();
    m_demo.reset();
    if (m_lockFd >= 0)
        ::close(m_lockFd);
}

void Daemon::loadState()
{
    // What this daemon was doing when it last stopped.
    std::string why;
    const auto state = readStateFile(m_options.dataDir / kStateFile, 1 << 20, stateProblem, why);
    if (!why.empty())
        notice(why + "; starting with no project joined");
    if (!state)
        return;
    for (const auto& link : (*state)["hubs"])
        if (auto hub = parseHubLink(link.get<std::string>()))
            m_hubs->follow(*hub);
    m_joinedHub = (*state)["joined_hub"].get<std::string>();
    m_joinedProject = (*state)["joined_project"].get<std::string>();
    m_userPaused = (*state)["paused"].get<bool>();
    m_snoozeUntilMs = (*state)["snooze_until_ms"].get<int64_t>();
}

Status Daemon::run()
{
    return m_server->run();
}

void Daemon::stop()
{
    {
        std::lock_guard lock(m_mutex);
        m_stopping = true;
    }
    m_wake.notify_all();
    if (m_server)
        m_server->stop();
    // Lets a running job finish (a demo hub starting) and drops the rest:
    // their requests are answered "internal", a waiting join() returns.
    if (m_changes)
        m_changes->stop();
    if (m_reads)
        m_reads->stop();
    if (m_background)
        m_background->stop();
}

void Daemon::log(const std::string& line)
{
    {
        std::lock_guard lock(m_logMutex);
        m_logLines.push_back(line);
        if (m_logLines.size() > kMaxLogLines)
            m_logLines.pop_front();
    }
    if (m_options.log)
        m_options.log(line);
    Value body = Value::map();
    body.set("line", line);
    publish(control::event::kLog, body);
}

void Daemon::notice(const std::string& line)
{
    {
        std::lock_guard lock(m_noticeMutex);
        m_notices.push_back(line);
        if (m_notices.size() > kMaxNotices)
            m_notices.pop_front();
    }
    log(line);
}

void Daemon::publish(std::string_view type, const Value& body)
{
    if (m_server)
        m_server->publish(type, body);
}

Daemon::StateSnapshot Daemon::stateSnapshot()
{
    json hubs = json::array();
    for (const HubEntry& entry : m_hubs->entries())
        if (entry.label != kDemoLabel)
            hubs.push_back(entry.link);
    const json state = {{"version", 1}, {"hubs", hubs}, {"joined_hub", m_joinedHub},
        {"joined_project", m_joinedProject}, {"paused", m_userPaused}, {"snooze_until_ms", m_snoozeUntilMs}};
    return {++m_stateSeq, state.dump(2) + "\n"};
}

Status Daemon::writeState(const StateSnapshot& snapshot)
{
    std::lock_guard lock(m_stateFileMutex);
    if (snapshot.seq <= m_writtenSeq)
        return Status::success(); // a newer state is on disk already
    m_writtenSeq = snapshot.seq;
    return net::writeFileAtomic(m_options.dataDir / kStateFile, snapshot.text, 0600);
}

Result<HubLink> Daemon::resolveHub(const std::string& hub)
{
    if (hub != kDemoLabel)
        return parseHubLink(hub);
    std::lock_guard demoLock(m_demoMutex);
    if (!m_demo || !m_demo->alive()) {
        m_demo.reset();
        DemoOptions demo;
        demo.dataDir = m_options.dataDir;
        demo.serverBinary = m_options.serverBinary;
        demo.corpusDir = m_options.demoCorpusDir;
        demo.log = [this](const std::string& line) {
            if (m_options.log)
                m_options.log(line);
        };
        auto started = DemoHub::start(demo);
        if (!started)
            return started.error();
        m_demo = std::move(*started);
        m_hubs->follow(m_demo->link(), kDemoLabel);
        {
            std::lock_guard lock(m_demoLinkMutex);
            m_demoLink = m_demo->link();
        }
        m_checkpoints->retryNow(kDemoLabel); // downloads that waited for it
    }
    return m_demo->link();
}

Result<HubLink> Daemon::currentHub(const std::string& hub) const
{
    if (hub != kDemoLabel)
        return parseHubLink(hub);
    std::lock_guard lock(m_demoLinkMutex);
    if (!m_demoLink)
        return Error::make(net::errc::kUnavailable, "the demo hub is not running (it starts when demo is joined)");
    return *m_demoLink;
}

Status Daemon::startRunner(const std::string& hubText, const HubLink& hub, const std::string& project)
{
    volunteer::AgentOptions options;
    options.dataDir = m_options.dataDir;
    options.displayName = m_settings.get(control::setting::kDisplayName);
    const std::string device = m_settings.get(control::setting::kDevice);
    options.device = device == "auto" ? "auto" : device;
    options.threads = int(m_settings.get(control::setting::kCpuThreads));
    options.pieceCacheBytes = uint64_t(m_settings.get(control::setting::kPieceCacheBytes));
    if (device == "cuda" && !LimitsMonitor::cudaDevice(m_settings).empty())
        options.device = LimitsMonitor::cudaDevice(m_settings);
    options.network = m_limits->throttle();
    if (device != "cpu")
        std::tie(options.gpuMemoryTotalBytes, options.gpuMemoryBudgetBytes) = m_limits->gpuMemory(m_settings);
    options.log = [this](const std::string& line) { log(line); };
    ProjectRunner::Target target{hub, hubText, project};
    m_runner = std::make_unique<ProjectRunner>(std::move(target), std::move(options), m_gate);
    m_metricRows.clear();
    m_nextMetricRound = 0;
    return Status::success();
}

void Daemon::refreshPaused()
{
    const limits::Decision& limit = m_limits->decision();
    m_gate.setBusyTarget(limit.run ? limit.busyTarget : 1.0);
    m_gate.setPaused(m_userPaused || m_snoozeUntilMs > unixNowMs() || m_generating || !limit.run);
}

Status Daemon::join(const std::string& hub, const std::string& project)
{
    auto done = std::make_shared<std::promise<Status>>();
    auto result = done->get_future();
    if (!m_changes->post([this, hub, project, done] { done->set_value(joinNow(hub, project)); }))
        return Error::make(control::errc::kBusy, "too many requests are waiting; try again shortly");
    try {
        return result.get();
    } catch (const std::future_error&) {
        return Error::make(control::errc::kStopping, "the daemon is stopping");
    }
}

Status Daemon::joinNow(const std::string& hubText, const std::string& project)
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
    auto hub = resolveHub(link);
    if (!hub)
        return hub.error();
    std::unique_ptr<ProjectRunner> old;
    StateSnapshot state;
    {
        std::lock_guard lock(m_mutex);
        if (link != kDemoLabel)
            m_hubs->follow(*hub);
        old = std::move(m_runner);
        m_joinedHub = link;
        m_joinedProject = project;
        refreshPaused();
        state = stateSnapshot();
    }
    const Status saved = writeState(state);
    // The old agent stops at a step boundary; its thread is joined here,
    // not under m_mutex.
    old.reset();
    {
        std::lock_guard lock(m_mutex);
        if (m_joinedHub == link && m_joinedProject == project && !m_runner)
            if (Status s = startRunner(link, *hub, project); !s)
                return s;
    }
    if (!saved)
        return saved;
    log("joined " + project + " at " + (link == kDemoLabel ? std::string("the local demo hub") : link));
    return Status::success();
}

void Daemon::resumeJoined()
{
    std::string hubText;
    std::string project;
    {
        std::lock_guard lock(m_mutex);
        hubText = m_joinedHub;
        project = m_joinedProject;
    }
    auto hub = resolveHub(hubText);
    std::lock_guard lock(m_mutex);
    if (m_joinedHub != hubText || m_joinedProject != project || m_runner)
        return; // joined or left meanwhile
    if (!hub) {
        log("cannot resume " + project + ": " + hub.error().message);
    } else if (Status s = startRunner(hubText, *hub, project); !s) {
        log("cannot resume " + project + ": " + s.error().message);
    } else {
        log("resumed " + project + (m_gate.paused() ? " (paused)" : ""));
    }
}

control::DaemonState Daemon::stateOf(const volunteer::AgentSummary* summary, std::string& why) const
{
    using control::DaemonState;
    why.clear();
    if (m_joinedProject.empty()) {
        why = "no project joined";
        return DaemonState::Idle;
    }
    if (m_snoozeUntilMs > unixNowMs()) {
        why = "snoozed";
        return DaemonState::Paused;
    }
    if (m_userPaused) {
        why = "paused by you";
        return DaemonState::Paused;
    }
    if (m_generating) {
        why = "generating text from a checkpoint";
        return DaemonState::Paused;
    }
    if (!m_limits->decision().run) {
        why = m_limits->decision().limit;
        return DaemonState::Paused;
    }
    if (!summary)
        return DaemonState::Starting;
    if (m_runner && !m_runner->running()) {
        const auto failure = m_runner->failure();
        why = failure ? failure->message : "stopped";
        return DaemonState::Stopped;
    }
    const std::string& phase = summary->phase;
    if (phase == "training" || phase == "uploading") {
        why = m_limits->decision().limit; // a busy share under 100%, or ""
        return DaemonState::Training;
    }
    if (phase == "waiting")
        return DaemonState::Waiting;
    if (phase == "syncing")
        return DaemonState::Syncing;
    if (phase == "offline") {
        why = summary->lastError;
        return DaemonState::Offline;
    }
    return DaemonState::Connecting;
}

control::Value Daemon::status() const
{
    std::lock_guard lock(m_mutex);
    std::optional<volunteer::AgentSummary> summary;
    if (m_runner)
        summary = m_runner->summary();
    std::string why;
    const std::string state(control::wireName(stateOf(summary ? &*summary : nullptr, why)));
    Value v = Value::map();
    v.set("state", state).set("reason", why);
    v.set("text", why.empty() ? state : state + ": " + why);
    v.set("hub", m_joinedHub).set("project", m_joinedProject);
    v.set("paused", m_userPaused).set("snooze_until_ms", m_snoozeUntilMs);
    v.set("device", m_settings.get(control::setting::kDevice)).set("public_key", m_identity.publicKey);
    Value limits = m_limits->report(m_gate.measuredBusy(), m_settings);
    if (summary && summary->microBatch > 0)
        limits.set("micro_batch", summary->microBatch);
    v.set("limit", m_limits->decision().limit).set("limit_code", control::wireName(m_limits->decision().code));
    v.set("limits", std::move(limits));
    if (summary) {
        v.set("phase", summary->phase).set("round", summary->round).set("task", summary->taskId);
        v.set("step", summary->step).set("steps", summary->steps).set("loss", summary->loss);
        v.set("tokens_per_second", summary->tokensPerSecond).set("version", summary->version);
        v.set("tasks", summary->tasks).set("accepted", summary->accepted).set("rejected", summary->rejected);
        const double busy = m_gate.measuredBusy();
        v.set("tokens", summary->tokens).set("busy_share", busy);
        v.set("effective_tokens_per_second", busy * summary->tokensPerSecond);
        v.set("last_error", summary->lastError).set("piece_fetches", summary->pieceFetches);
        if (!summary->deviceName.empty())
            v.set("device_in_use", summary->deviceName);
    }
    Value notices = Value::array();
    {
        std::lock_guard noticeLock(m_noticeMutex);
        for (const std::string& n : m_notices)
            notices.push(n);
    }
    v.set("notices", std::move(notices));
    return v;
}

void Daemon::refreshHubs()
{
    m_hubs->refresh(2000);
    std::unique_lock lock(m_mutex);
    const std::string project = m_joinedProject;
    std::optional<HubLink> hub;
    std::string hubText;
    if (m_runner) {
        hub = m_runner->target().hub;
        hubText = m_runner->target().hubLink;
    }
    const uint64_t since = m_nextMetricRound;
    const bool autoDownload = m_settings.get(control::setting::kAutoDownload);
    const uint64_t autoMax = uint64_t(m_settings.get(control::setting::kAutoDownloadMaxBytes));
    lock.unlock();
    if (hub) {
        auto rows = m_hubs->call<net::MetricsReply>(*hub, net::MetricsRequest{project, since, 4096}, 3000);
        if (rows && !rows->rows.empty()) {
            Value added = Value::array();
            lock.lock();
            if (m_joinedProject != project) // joined another project meanwhile
                return;
            for (const net::MetricRow& row : rows->rows) {
                m_metricRows.push_back(metricValue(row));
                added.push(metricValue(row));
                m_nextMetricRound = row.round + 1;
            }
            while (m_metricRows.size() > kMaxMetricRows)
                m_metricRows.pop_front();
            lock.unlock();
            Value body = Value::map();
            body.set("project", project).set("rows", std::move(added));
            publish(control::event::kMetrics, body);
        }
        // A new checkpoint: tell, and fetch it when the settings say so.
        auto list = m_hubs->call<net::ListCheckpointsReply>(*hub, net::ListCheckpointsRequest{project}, 3000);
        if (list && !list->checkpoints.empty()) {
            const net::CheckpointInfo& newest = list->checkpoints.back();
            const auto local = m_checkpoints->newestLocal(project);
            uint64_t bytes = 0;
            for (const auto& f : newest.files)
                bytes += f.bytes;
            if (!local || *local < newest.round) {
                Value body = Value::map();
                body.set("project", project).set("round", newest.round).set("bytes", bytes);
                body.set("val_loss", newest.valLoss ? Value(*newest.valLoss) : Value());
                publish(control::event::kCheckpointPublished, body);
                if (autoDownload && bytes <= autoMax)
                    (void)m_checkpoints->download(hubText, project, newest.round);
            }
        }
    }
}

void Daemon::poll()
{
    std::unique_lock lock(m_mutex);
    auto nextRefresh = std::chrono::steady_clock::now();
    while (!m_stopping) {
        m_wake.wait_for(lock, std::chrono::milliseconds(m_options.pollMs), [&] { return m_stopping; });
        if (m_stopping)
            break;
        if (m_snoozeUntilMs && m_snoozeUntilMs <= unixNowMs()) {
            m_snoozeUntilMs = 0;
            const StateSnapshot state = stateSnapshot();
            lock.unlock();
            (void)writeState(state);
            lock.lock();
        }
        // The log says when limits stop or release training (the status
        // says which limit acts at every moment).
        const bool ranBefore = m_limits->decision().run;
        m_limits->evaluate(m_settings, std::chrono::system_clock::now());
        refreshPaused();
        if (const auto& now = m_limits->decision(); now.run != ranBefore && !m_joinedProject.empty())
            log(now.run ? std::string("limits allow training again") : "limits pause training: " + now.limit);
        std::optional<volunteer::AgentSummary> summary;
        if (m_runner)
            summary = m_runner->summary();
        std::string why;
        const std::string state(control::wireName(stateOf(summary ? &*summary : nullptr, why)));
        const std::string text = why.empty() ? state : state + ": " + why;
        // This machine's history: the busy share over the governor's window
        // and the tokens/s it gives (the steps' own rate times that share),
        // so the curve is smooth across step and task boundaries.
        if (summary) {
            const double busy = m_gate.measuredBusy();
            Value row = Value::map();
            row.set("time_ms", unixNowMs());
            row.set("tokens_per_second", busy * summary->tokensPerSecond);
            row.set("busy_share", busy);
            row.set("step_tokens_per_second", summary->phase == "training" ? summary->tokensPerSecond : 0.0);
            if (const auto celsius = m_limits->gpuTemperatureC())
                row.set("gpu_temperature_c", *celsius);
            m_machineRows.push_back(row);
            if (m_machineRows.size() > kMaxMachineRows)
                m_machineRows.pop_front();
        }
        lock.unlock();
        Value progress = status();
        if (text != m_lastStateText) {
            m_lastStateText = text;
            publish(control::event::kState, progress);
        }
        publish(control::event::kProgress, progress);

        if (std::chrono::steady_clock::now() >= nextRefresh) {
            nextRefresh = std::chrono::steady_clock::now() + std::chrono::milliseconds(m_options.hubRefreshMs);
            // Off this thread: hubs that do not answer (2 s each) must not
            // hold the status events up.
            if (!m_refreshing.exchange(true) && !m_background->post([this] {
                    refreshHubs();
                    m_refreshing = false;
                }))
                m_refreshing = false;
        }
        lock.lock();
    }
}

} // namespace crowdtrain::daemon
