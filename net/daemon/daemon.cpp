#include "net/daemon/daemon.h"

#include "net/control/control_paths.h"
#include "net/transport/atomic_write.h"
#include "net/volunteer/local_store.h"
#include "net/wire/error_codes.h"

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
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

Value metricValue(const net::MetricRow& row)
{
    Value v = Value::map();
    v.set("round", row.round).set("tokens", row.tokens);
    v.set("train_loss", row.trainLoss ? Value(*row.trainLoss) : Value());
    v.set("val_loss", row.valLoss ? Value(*row.valLoss) : Value());
    v.set("volunteers", row.volunteers).set("time_ms", row.timeMs);
    return v;
}

Error badRequest(const std::string& message)
{
    return Error::make("bad_request", message);
}

Result<std::string> requiredText(const Value& body, std::string_view key)
{
    if (!body[key].isString() || body[key].toString().empty())
        return badRequest("\"" + std::string(key) + "\" is required (text)");
    return body[key].toString();
}

// The hub link in body.link.
Result<HubLink> hubOf(const Value& body)
{
    auto link = requiredText(body, "link");
    if (!link)
        return link.error();
    return parseHubLink(*link);
}

Result<uint64_t> requiredRound(const Value& body)
{
    if (!body["round"].isInt() || body["round"].toInt() < 0)
        return badRequest("\"round\" is required (a round number)");
    return body["round"].toUInt();
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
        return Error::make("io_error", lockFile.string() + ": " + std::strerror(errno));
    if (::flock(m_lockFd, LOCK_EX | LOCK_NB) != 0) {
        char pid[32] = {};
        (void)::pread(m_lockFd, pid, sizeof pid - 1, 0);
        return Error::make("already_running",
            "a Crowdtrain daemon is already running for this user (pid " + std::string(pid) + ", control folder "
                + m_options.controlDir.string() + ")");
    }
    const std::string pid = std::to_string(::getpid());
    (void)::ftruncate(m_lockFd, 0);
    (void)::pwrite(m_lockFd, pid.data(), pid.size(), 0);

    std::error_code ec;
    std::filesystem::create_directories(m_options.dataDir, ec);
    if (ec)
        return Error::make("io_error", m_options.dataDir.string() + ": " + ec.message());
    std::string notice;
    auto settings = Settings::load(m_options.configDir / "settings.json", notice);
    if (!settings)
        return settings.error();
    m_settings = std::move(*settings);
    if (!notice.empty()) {
        m_notices.push_back(notice);
        log(notice);
    }
    auto identity = net::loadOrCreateKeyPair(m_options.dataDir / "identity.key");
    if (!identity)
        return identity.error();
    m_identity = *identity;
    m_context = std::make_unique<zmq::context_t>();
    m_hubs = std::make_unique<HubDirectory>(*m_context, m_identity);

    // What this daemon was doing when it last stopped.
    auto text = net::readSmallFile(m_options.dataDir / kStateFile, 1 << 20);
    const json state = text ? json::parse(*text, nullptr, false) : json::object();
    if (state.is_discarded() || !state.is_object()) {
        m_notices.push_back("the daemon's state file " + (m_options.dataDir / kStateFile).string()
            + " could not be read; starting with no project joined");
    } else {
        for (const auto& link : state.value("hubs", json::array()))
            if (link.is_string())
                if (auto hub = parseHubLink(link.get<std::string>()))
                    m_hubs->follow(*hub);
        m_joinedHub = state.value("joined_hub", "");
        m_joinedProject = state.value("joined_project", "");
        m_userPaused = state.value("paused", false);
        m_snoozeUntilMs = state.value("snooze_until_ms", int64_t(0));
    }

    m_limits = std::make_unique<LimitsMonitor>(m_options.dataDir, m_options.probes);

    CheckpointsOptions checkpoints;
    checkpoints.root = m_options.dataDir / "checkpoints";
    checkpoints.throttle = m_limits->throttle();
    checkpoints.publish = [this](std::string_view type, const Value& body) { publish(type, body); };
    checkpoints.log = [this](const std::string& line) { log(line); };
    checkpoints.generating = [this](bool on) {
        std::lock_guard lock(m_mutex);
        m_generating = on && m_settings.boolean("generate_pauses_training");
        refreshPaused();
    };
    m_checkpoints = std::make_unique<Checkpoints>(*m_hubs, std::move(checkpoints));

    auto server = control::ControlServer::open(
        m_options.controlDir, [this](const control::Request& request) { return handle(request); });
    if (!server)
        return server.error();
    m_server = std::move(*server);

    if (!m_joinedProject.empty()) {
        std::lock_guard lock(m_mutex);
        m_limits->evaluate(m_settings, std::chrono::system_clock::now());
        refreshPaused();
        auto hub = resolveHub(m_joinedHub);
        if (!hub) {
            log("cannot resume " + m_joinedProject + ": " + hub.error().message);
        } else if (Status s = startRunner(m_joinedHub, *hub, m_joinedProject); !s) {
            log("cannot resume " + m_joinedProject + ": " + s.error().message);
        } else {
            log("resumed " + m_joinedProject + (m_gate.paused() ? " (paused)" : ""));
        }
    }
    m_poller = std::thread([this] { poll(); });
    log("daemon " + pid + " serving " + control::controlEndpoint(m_options.controlDir));
    return Status::success();
}

Daemon::~Daemon()
{
    stop();
    if (m_poller.joinable())
        m_poller.join();
    {
        std::lock_guard lock(m_mutex);
        stopRunner();
    }
    m_checkpoints.reset();
    m_server.reset();
    m_demo.reset();
    if (m_lockFd >= 0)
        ::close(m_lockFd);
}

void Daemon::run()
{
    m_server->run();
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
    publish("log", body);
}

void Daemon::publish(std::string_view type, const Value& body)
{
    if (m_server)
        m_server->publish(type, body);
}

Status Daemon::saveState()
{
    json hubs = json::array();
    for (const HubEntry& entry : m_hubs->entries())
        if (entry.label != kDemoLabel)
            hubs.push_back(entry.link);
    const json state = {{"version", 1}, {"hubs", hubs}, {"joined_hub", m_joinedHub},
        {"joined_project", m_joinedProject}, {"paused", m_userPaused}, {"snooze_until_ms", m_snoozeUntilMs}};
    return net::writeFileAtomic(m_options.dataDir / kStateFile, state.dump(2) + "\n", 0600);
}

Result<HubLink> Daemon::resolveHub(const std::string& hub)
{
    if (hub == kDemoLabel) {
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
        }
        return m_demo->link();
    }
    return parseHubLink(hub);
}

Status Daemon::startRunner(const std::string& hubText, const HubLink& hub, const std::string& project)
{
    volunteer::AgentOptions options;
    options.dataDir = m_options.dataDir;
    options.displayName = m_settings.text("display_name");
    const std::string device = m_settings.text("device");
    options.device = device == "auto" ? "auto" : device;
    options.threads = int(m_settings.integer("cpu_threads"));
    options.pieceCacheBytes = uint64_t(m_settings.integer("piece_cache_bytes"));
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

void Daemon::stopRunner()
{
    // The runner's destructor stops the agent at a step boundary and joins
    // it; the gate must not hold it meanwhile.
    std::unique_ptr<ProjectRunner> runner = std::move(m_runner);
    runner.reset();
}

void Daemon::refreshPaused()
{
    const limits::Decision& limit = m_limits->decision();
    m_gate.setBusyTarget(limit.run ? limit.busyTarget : 1.0);
    m_gate.setPaused(m_userPaused || m_snoozeUntilMs > unixNowMs() || m_generating || !limit.run);
}

Status Daemon::join(const std::string& hubText, const std::string& project)
{
    std::lock_guard lock(m_mutex);
    if (project.empty())
        return badRequest("the project's name is required");
    auto hub = resolveHub(hubText);
    if (!hub)
        return hub.error();
    if (hubText != kDemoLabel)
        m_hubs->follow(*hub);
    stopRunner();
    const std::string link = hubText == kDemoLabel ? std::string(kDemoLabel) : formatHubLink(*hub);
    m_joinedHub = link;
    m_joinedProject = project;
    refreshPaused();
    if (Status s = startRunner(link, *hub, project); !s)
        return s;
    if (Status s = saveState(); !s)
        return s;
    log("joined " + project + " at " + (hubText == kDemoLabel ? "the local demo hub" : link));
    return Status::success();
}

std::string Daemon::stateText(const volunteer::AgentSummary* summary, std::string& why) const
{
    why.clear();
    if (m_joinedProject.empty()) {
        why = "no project joined";
        return "idle";
    }
    if (m_snoozeUntilMs > unixNowMs()) {
        why = "snoozed";
        return "paused";
    }
    if (m_userPaused) {
        why = "paused by you";
        return "paused";
    }
    if (m_generating) {
        why = "generating text from a checkpoint";
        return "paused";
    }
    if (!m_limits->decision().run) {
        why = m_limits->decision().limit;
        return "paused";
    }
    if (!summary)
        return "starting";
    if (m_runner && !m_runner->running()) {
        const auto failure = m_runner->failure();
        why = failure ? failure->message : "stopped";
        return "stopped";
    }
    const std::string& phase = summary->phase;
    if (phase == "training" || phase == "uploading") {
        why = m_limits->decision().limit; // a busy share under 100%, or ""
        return "training";
    }
    if (phase == "waiting")
        return "waiting for the round";
    if (phase == "syncing")
        return "downloading the model";
    if (phase == "offline") {
        why = summary->lastError;
        return "offline";
    }
    return "connecting";
}

control::Value Daemon::status() const
{
    std::lock_guard lock(m_mutex);
    std::optional<volunteer::AgentSummary> summary;
    if (m_runner)
        summary = m_runner->summary();
    std::string why;
    const std::string state = stateText(summary ? &*summary : nullptr, why);
    Value v = Value::map();
    v.set("state", state).set("reason", why);
    v.set("text", why.empty() ? state : state + ": " + why);
    v.set("hub", m_joinedHub).set("project", m_joinedProject);
    v.set("paused", m_userPaused).set("snooze_until_ms", m_snoozeUntilMs);
    v.set("device", m_settings.text("device")).set("public_key", m_identity.publicKey);
    Value limits = m_limits->report(m_gate.measuredBusy(), m_settings);
    if (summary && summary->microBatch > 0)
        limits.set("micro_batch", summary->microBatch);
    v.set("limit", m_limits->decision().limit).set("limits", std::move(limits));
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
    for (const std::string& n : m_notices)
        notices.push(n);
    v.set("notices", std::move(notices));
    return v;
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
            (void)saveState();
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
        const std::string state = stateText(summary ? &*summary : nullptr, why);
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
            publish("state", progress);
        }
        publish("progress", progress);

        if (std::chrono::steady_clock::now() >= nextRefresh) {
            nextRefresh = std::chrono::steady_clock::now() + std::chrono::milliseconds(m_options.hubRefreshMs);
            m_hubs->refresh(2000);
            lock.lock();
            const std::string project = m_joinedProject;
            std::optional<HubLink> hub;
            if (m_runner)
                hub = m_runner->target().hub;
            const uint64_t since = m_nextMetricRound;
            const bool autoDownload = m_settings.boolean("auto_download");
            const uint64_t autoMax = uint64_t(m_settings.integer("auto_download_max_bytes"));
            lock.unlock();
            if (hub) {
                auto rows = m_hubs->call<net::MetricsReply>(*hub, net::MetricsRequest{project, since, 4096}, 3000);
                if (rows && !rows->rows.empty()) {
                    Value added = Value::array();
                    lock.lock();
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
                    publish("metrics", body);
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
                        publish("checkpoint_published", body);
                        if (autoDownload && bytes <= autoMax)
                            (void)m_checkpoints->download(*hub, project, newest.round);
                    }
                }
            }
        }
        lock.lock();
    }
}

Result<Value> Daemon::handle(const control::Request& request)
{
    const std::string& type = request.type;
    const Value& body = request.body;
    if (type == "status")
        return status();
    if (type == "settings_get") {
        std::lock_guard lock(m_mutex);
        Value v = Value::map();
        v.set("settings", m_settings.values()).set("described", m_settings.described());
        return v;
    }
    if (type == "settings_set")
        return settingsSet(body);
    if (type == "follow")
        return follow(body);
    if (type == "unfollow")
        return unfollow(body);
    if (type == "catalog")
        return catalog(body);
    if (type == "join") {
        auto hub = requiredText(body, "hub");
        if (!hub)
            return hub.error();
        auto project = requiredText(body, "project");
        if (!project)
            return project.error();
        if (Status s = join(*hub, *project); !s)
            return s.error();
        return status();
    }
    if (type == "leave") {
        std::lock_guard lock(m_mutex);
        if (m_joinedProject.empty())
            return Error::make("not_joined", "no project is joined");
        const std::string left = m_joinedProject;
        stopRunner();
        m_joinedHub.clear();
        m_joinedProject.clear();
        if (Status s = saveState(); !s)
            return s.error();
        log("left " + left);
        return Value::map();
    }
    if (type == "pause")
        return pause(body, true);
    if (type == "resume")
        return pause(body, false);
    if (type == "snooze")
        return snooze(body);
    if (type == "metrics")
        return metrics(body);
    if (type == "machine_history")
        return machineHistory();
    if (type == "contributions")
        return contributions();
    if (type == "log")
        return logLines();
    if (type == "checkpoints" || type == "download" || type == "download_pause" || type == "download_resume"
        || type == "download_cancel" || type == "checkpoint_delete" || type == "generate") {
        std::optional<HubLink> hub;
        std::string project;
        {
            std::lock_guard lock(m_mutex);
            project = body["project"].isString() ? body["project"].toString() : m_joinedProject;
            if (m_runner && m_runner->target().project == project)
                hub = m_runner->target().hub;
        }
        if (type == "checkpoints") {
            if (project.empty() || !hub) {
                Value v = Value::map();
                v.set("project", project).set("checkpoints", Value::array()).set("local", m_checkpoints->local());
                return v;
            }
            auto list = m_checkpoints->list(*hub, project);
            if (!list)
                return list.error();
            Value v = Value::map();
            v.set("project", project).set("checkpoints", std::move(*list)).set("local", m_checkpoints->local());
            return v;
        }
        auto round = requiredRound(body);
        if (!round)
            return round.error();
        Status done = Status::success();
        if (type == "download") {
            if (!hub)
                return Error::make("not_joined", "join " + project + " to download its checkpoints");
            done = m_checkpoints->download(*hub, project, *round);
        } else if (type == "download_pause" || type == "download_resume") {
            done = m_checkpoints->pauseDownload(project, *round, type == "download_pause");
        } else if (type == "download_cancel") {
            done = m_checkpoints->cancel(project, *round);
        } else if (type == "checkpoint_delete") {
            done = m_checkpoints->remove(project, *round);
        } else {
            GenerateRequest g;
            g.project = project;
            g.round = *round;
            g.prompt = body["prompt"].toString();
            g.temperature = body.has("temperature") ? body["temperature"].toDouble() : 0.8;
            g.topK = body.has("top_k") ? body["top_k"].toInt() : 200;
            g.maxTokens = body.has("max_tokens") ? body["max_tokens"].toInt() : 200;
            if (!(g.temperature >= 0 && g.temperature <= 10) || g.topK < 0 || g.maxTokens < 1 || g.maxTokens > 4096)
                return badRequest("temperature takes 0 to 10, top_k >= 0, max_tokens 1 to 4096");
            auto id = m_checkpoints->generate(std::move(g));
            if (!id)
                return id.error();
            Value v = Value::map();
            v.set("id", *id).set("folder", m_checkpoints->folderOf(project, *round).string());
            return v;
        }
        if (!done)
            return done.error();
        Value v = Value::map();
        v.set("folder", m_checkpoints->folderOf(project, *round).string());
        return v;
    }
    return Error::make("unknown_type", "the daemon has no request \"" + type + "\"");
}

Result<Value> Daemon::settingsSet(const Value& body)
{
    auto key = requiredText(body, "key");
    if (!key)
        return key.error();
    std::lock_guard lock(m_mutex);
    if (Status s = m_settings.set(*key, body["value"]); !s)
        return s.error();
    log("setting " + *key + " = " + body["value"].toJson());
    Value v = Value::map();
    v.set("settings", m_settings.values());
    return v;
}

Result<Value> Daemon::follow(const Value& body)
{
    auto hub = hubOf(body);
    if (!hub)
        return hub.error();
    {
        std::lock_guard lock(m_mutex);
        m_hubs->follow(*hub);
        if (Status s = saveState(); !s)
            return s.error();
    }
    m_hubs->refreshOne(formatHubLink(*hub), 2000);
    Value v = Value::map();
    v.set("link", formatHubLink(*hub));
    return v;
}

Result<Value> Daemon::unfollow(const Value& body)
{
    auto hub = hubOf(body);
    if (!hub)
        return hub.error();
    std::lock_guard lock(m_mutex);
    if (!m_hubs->unfollow(formatHubLink(*hub)))
        return Error::make("not_found", "this hub is not followed: " + body["link"].toString());
    if (Status s = saveState(); !s)
        return s.error();
    return Value::map();
}

Result<Value> Daemon::pause(const Value&, bool paused)
{
    std::lock_guard lock(m_mutex);
    m_userPaused = paused;
    if (!paused)
        m_snoozeUntilMs = 0;
    refreshPaused();
    if (Status s = saveState(); !s)
        return s.error();
    log(paused ? "paused by the volunteer" : "resumed by the volunteer");
    Value v = Value::map();
    v.set("paused", m_userPaused);
    return v;
}

Result<Value> Daemon::snooze(const Value& body)
{
    const int64_t seconds = body.has("seconds") ? body["seconds"].toInt(-1) : 3600;
    if (seconds < 1 || seconds > 7 * 24 * 3600)
        return badRequest("seconds takes 1 to 604800 (a week)");
    std::lock_guard lock(m_mutex);
    m_snoozeUntilMs = unixNowMs() + seconds * 1000;
    refreshPaused();
    if (Status s = saveState(); !s)
        return s.error();
    Value v = Value::map();
    v.set("snooze_until_ms", m_snoozeUntilMs);
    return v;
}

} // namespace crowdtrain::daemon
