// The daemon's control requests (docs/protocol.md 12.2): every field is
// checked here, on the control thread, before anything happens; then the
// request is answered at once from memory or queued: "changes" (in order)
// for what changes something, "reads" for hub reads. Split from daemon.cpp,
// which keeps the state, the joined project and the poller.
#include "net/daemon/daemon.h"

#include "net/control/control_names.h"
#include "net/daemon/request_fields.h"

namespace crowdtrain::daemon {

namespace {

using control::Value;
namespace request = control::request;

// "demo" or a hub link, checked; the text the daemon stores.
Result<std::string> hubTextOf(const Value& body)
{
    auto text = requiredText(body, "hub");
    if (!text)
        return text.error();
    if (*text == kDemoLabel)
        return *text;
    auto hub = parseHubLink(*text);
    if (!hub)
        return hub.error(); // "bad_hub_link"
    return formatHubLink(*hub);
}

Result<HubLink> linkOf(const Value& body)
{
    auto text = requiredText(body, "link");
    if (!text)
        return text.error();
    return parseHubLink(*text); // "bad_hub_link"
}

} // namespace

void Daemon::later(WorkQueue& queue, control::Responder respond, std::function<Result<Value>()> work)
{
    const bool queued = queue.post([respond, work = std::move(work)] {
        try {
            respond(work());
        } catch (const std::exception& e) {
            respond(Error::make(control::errc::kInternal, std::string("the daemon failed: ") + e.what()));
        }
    });
    if (!queued)
        respond(Error::make(control::errc::kBusy, "the daemon has too much queued; try again shortly"));
}

void Daemon::handle(const control::Request& request, control::Responder respond)
{
    const std::string& type = request.type;
    const Value& body = request.body;
    // Answered at once, from memory.
    if (type == request::kStatus)
        return respond(status());
    if (type == request::kSettingsGet) {
        std::lock_guard lock(m_mutex);
        Value v = Value::map();
        v.set("settings", m_settings.values()).set("described", m_settings.described());
        return respond(v);
    }
    if (type == request::kMetrics) {
        auto since = optionalUInt(body, "since_round");
        return respond(since ? metrics(since->value_or(0)) : Result<Value>(since.error()));
    }
    if (type == request::kMachineHistory)
        return respond(machineHistory());
    if (type == request::kLog)
        return respond(logLines());
    if (type == request::kCatalog) {
        auto refresh = optionalBool(body, "refresh");
        if (!refresh)
            return respond(refresh.error());
        if (!refresh->value_or(false))
            return respond(catalog(false));
        return later(*m_reads, respond, [this] { return catalog(true); });
    }
    if (type == request::kContributions)
        return later(*m_reads, respond, [this] { return contributions(); });

    // Changes, in the order they came.
    if (type == request::kSettingsSet) {
        auto key = requiredText(body, "key");
        if (!key)
            return respond(key.error());
        return later(
            *m_changes, respond, [this, key = *key, value = body["value"]] { return settingsSet(key, value); });
    }
    if (type == request::kFollow || type == request::kUnfollow) {
        auto hub = linkOf(body);
        if (!hub)
            return respond(hub.error());
        if (type == request::kFollow)
            return later(*m_changes, respond, [this, hub = *hub] { return follow(hub); });
        return later(*m_changes, respond, [this, hub = *hub] { return unfollow(hub); });
    }
    if (type == request::kJoin) {
        auto hub = hubTextOf(body);
        if (!hub)
            return respond(hub.error());
        auto project = requiredName(body, "project");
        if (!project)
            return respond(project.error());
        return later(*m_changes, respond, [this, hub = *hub, project = *project]() -> Result<Value> {
            if (Status s = joinNow(hub, project); !s)
                return s.error();
            return status();
        });
    }
    if (type == request::kLeave)
        return later(*m_changes, respond, [this] { return leave(); });
    if (type == request::kPause || type == request::kResume)
        return later(*m_changes, respond, [this, paused = type == request::kPause] { return pause(paused); });
    if (type == request::kSnooze) {
        auto seconds = optionalInt(body, "seconds", 1, 7 * 24 * 3600);
        if (!seconds)
            return respond(seconds.error());
        return later(*m_changes, respond, [this, s = seconds->value_or(3600)] { return snooze(s); });
    }
    if (type == request::kCheckpoints || type == request::kDownload || type == request::kDownloadPause
        || type == request::kDownloadResume || type == request::kDownloadCancel || type == request::kCheckpointDelete
        || type == request::kGenerate) {
        CheckpointRequest r;
        r.type = type;
        auto project = optionalName(body, "project");
        if (!project)
            return respond(project.error());
        r.project = *project;
        if (type == request::kCheckpoints)
            return later(*m_reads, respond, [this, r] { return checkpointRequest(r); });
        auto round = requiredUInt(body, "round");
        if (!round)
            return respond(round.error());
        r.round = *round;
        if (type == request::kGenerate) {
            auto prompt = requiredText(body, "prompt");
            auto temperature = optionalNumber(body, "temperature", 0, 10);
            auto topK = optionalInt(body, "top_k", 0, 1'000'000);
            auto maxTokens = optionalInt(body, "max_tokens", 1, 4096);
            if (!prompt)
                return respond(prompt.error());
            for (const Error* e : {temperature ? nullptr : &temperature.error(), topK ? nullptr : &topK.error(),
                     maxTokens ? nullptr : &maxTokens.error()})
                if (e)
                    return respond(*e);
            r.generate.prompt = *prompt;
            r.generate.temperature = temperature->value_or(0.8);
            r.generate.topK = topK->value_or(200);
            r.generate.maxTokens = maxTokens->value_or(200);
        }
        return later(*m_changes, respond, [this, r] { return checkpointRequest(r); });
    }
    respond(Error::make(control::errc::kUnknownType, "the daemon has no request \"" + type + "\""));
}

Result<Value> Daemon::checkpointRequest(const CheckpointRequest& r)
{
    std::optional<HubLink> hub;
    std::string hubText;
    std::string project;
    {
        std::lock_guard lock(m_mutex);
        project = r.project.value_or(m_joinedProject);
        if (m_runner && m_runner->target().project == project) {
            hub = m_runner->target().hub;
            hubText = m_runner->target().hubLink;
        }
    }
    if (r.type == request::kCheckpoints) {
        Value v = Value::map();
        v.set("project", project).set("checkpoints", Value::array());
        if (!project.empty() && hub) {
            auto list = m_checkpoints->list(*hub, project);
            if (!list)
                return list.error();
            v.set("checkpoints", std::move(*list));
        }
        v.set("local", m_checkpoints->local());
        return v;
    }
    if (project.empty())
        return Error::make(control::errc::kNotJoined, "no project is joined and none was named");
    Status done = Status::success();
    if (r.type == request::kDownload) {
        if (!hub)
            return Error::make(control::errc::kNotJoined, "join " + project + " to download its checkpoints");
        done = m_checkpoints->download(hubText, project, r.round);
    } else if (r.type == request::kDownloadPause || r.type == request::kDownloadResume) {
        done = m_checkpoints->pauseDownload(project, r.round, r.type == request::kDownloadPause);
    } else if (r.type == request::kDownloadCancel) {
        done = m_checkpoints->cancel(project, r.round);
    } else if (r.type == request::kCheckpointDelete) {
        done = m_checkpoints->remove(project, r.round);
    } else {
        GenerateRequest g = r.generate;
        g.project = project;
        g.round = r.round;
        auto id = m_checkpoints->generate(std::move(g));
        if (!id)
            return id.error();
        Value v = Value::map();
        v.set("id", *id).set("folder", m_checkpoints->folderOf(project, r.round).string());
        return v;
    }
    if (!done)
        return done.error();
    Value v = Value::map();
    v.set("folder", m_checkpoints->folderOf(project, r.round).string());
    return v;
}

Result<Value> Daemon::settingsSet(const std::string& key, const Value& value)
{
    // Changed and written on a copy, without m_mutex (only this queue
    // changes the settings), then swapped in.
    Settings changed;
    {
        std::lock_guard lock(m_mutex);
        changed = m_settings;
    }
    if (Status s = changed.set(key, value); !s)
        return s.error();
    Value v = Value::map();
    v.set("settings", changed.values());
    {
        std::lock_guard lock(m_mutex);
        m_settings = std::move(changed);
    }
    log("setting " + key + " = " + value.toJson());
    return v;
}

Result<Value> Daemon::follow(const HubLink& hub)
{
    StateSnapshot state;
    {
        std::lock_guard lock(m_mutex);
        m_hubs->follow(hub);
        state = stateSnapshot();
    }
    if (Status s = writeState(state); !s)
        return s.error();
    m_hubs->refreshOne(formatHubLink(hub), 2000);
    Value v = Value::map();
    v.set("link", formatHubLink(hub));
    return v;
}

Result<Value> Daemon::unfollow(const HubLink& hub)
{
    StateSnapshot state;
    {
        std::lock_guard lock(m_mutex);
        if (!m_hubs->unfollow(formatHubLink(hub)))
            return Error::make(control::errc::kNotFound, "this hub is not followed: " + formatHubLink(hub));
        state = stateSnapshot();
    }
    if (Status s = writeState(state); !s)
        return s.error();
    return Value::map();
}

Result<Value> Daemon::leave()
{
    std::unique_ptr<ProjectRunner> old;
    std::string left;
    StateSnapshot state;
    {
        std::lock_guard lock(m_mutex);
        if (m_joinedProject.empty())
            return Error::make(control::errc::kNotJoined, "no project is joined");
        left = m_joinedProject;
        old = std::move(m_runner);
        m_joinedHub.clear();
        m_joinedProject.clear();
        state = stateSnapshot();
    }
    old.reset(); // the agent stops at a step boundary, without m_mutex
    if (Status s = writeState(state); !s)
        return s.error();
    log("left " + left);
    return Value::map();
}

Result<Value> Daemon::pause(bool paused)
{
    StateSnapshot state;
    {
        std::lock_guard lock(m_mutex);
        m_userPaused = paused;
        if (!paused)
            m_snoozeUntilMs = 0;
        refreshPaused();
        state = stateSnapshot();
    }
    if (Status s = writeState(state); !s)
        return s.error();
    log(paused ? "paused by the volunteer" : "resumed by the volunteer");
    Value v = Value::map();
    v.set("paused", paused);
    return v;
}

Result<Value> Daemon::snooze(int64_t seconds)
{
    StateSnapshot state;
    int64_t until = 0;
    {
        std::lock_guard lock(m_mutex);
        m_snoozeUntilMs = unixNowMs() + seconds * 1000;
        until = m_snoozeUntilMs;
        refreshPaused();
        state = stateSnapshot();
    }
    if (Status s = writeState(state); !s)
        return s.error();
    Value v = Value::map();
    v.set("snooze_until_ms", until);
    return v;
}

} // namespace crowdtrain::daemon
