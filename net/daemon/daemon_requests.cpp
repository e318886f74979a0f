#include "net/daemon/daemon_requests.h"

#include "net/control/control_names.h"
#include "net/daemon/hub_queries.h"
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

Planned now(std::function<Result<Value>()> work)
{
    return {Lane::Now, std::move(work)};
}

Planned changes(std::function<Result<Value>()> work)
{
    return {Lane::Changes, std::move(work)};
}

Planned reads(std::function<Result<Value>()> work)
{
    return {Lane::Reads, std::move(work)};
}

struct CheckpointRequest {
    std::string_view type;
    std::optional<std::string> project; // absent: the joined one
    uint64_t round = 0;
    GenerateRequest generate;
};

Result<Value> runCheckpointRequest(const RequestParts& parts, const CheckpointRequest& r)
{
    const JoinedProject::Joined joined = parts.joined.joined();
    const std::string project = r.project.value_or(joined.project);
    std::optional<HubLink> hub;
    std::string hubText;
    if (joined.runner && joined.runner->project == project) {
        hub = joined.runner->hub;
        hubText = joined.runner->hubLink;
    }
    Checkpoints& checkpoints = parts.checkpoints;
    if (r.type == request::kCheckpoints) {
        Value v = Value::map();
        v.set("project", project).set("checkpoints", Value::array());
        if (!project.empty() && hub) {
            auto list = checkpoints.list(*hub, project);
            if (!list)
                return list.error();
            v.set("checkpoints", std::move(*list));
        }
        v.set("local", checkpoints.folders().local());
        return v;
    }
    if (project.empty())
        return Error::make(control::errc::kNotJoined, "no project is joined and none was named");
    Status done = Status::success();
    if (r.type == request::kDownload) {
        if (!hub)
            return Error::make(control::errc::kNotJoined, "join " + project + " to download its checkpoints");
        done = checkpoints.download(hubText, project, r.round);
    } else if (r.type == request::kDownloadPause || r.type == request::kDownloadResume) {
        done = checkpoints.pauseDownload(project, r.round, r.type == request::kDownloadPause);
    } else if (r.type == request::kDownloadCancel) {
        done = checkpoints.cancel(project, r.round);
    } else if (r.type == request::kCheckpointDelete) {
        done = checkpoints.remove(project, r.round);
    } else {
        GenerateRequest g = r.generate;
        g.project = project;
        g.round = r.round;
        auto id = checkpoints.generate(std::move(g));
        if (!id)
            return id.error();
        Value v = Value::map();
        v.set("id", *id).set("folder", checkpoints.folders().folderOf(project, r.round).string());
        return v;
    }
    if (!done)
        return done.error();
    Value v = Value::map();
    v.set("folder", checkpoints.folders().folderOf(project, r.round).string());
    return v;
}

// The checkpoint requests' fields: `project`?, then `round` (all but
// `checkpoints`), then generate's own.
Result<CheckpointRequest> checkpointFields(std::string_view type, const Value& body)
{
    CheckpointRequest r;
    r.type = type;
    auto project = optionalName(body, "project");
    if (!project)
        return project.error();
    r.project = *project;
    if (type == request::kCheckpoints)
        return r;
    auto round = requiredUInt(body, "round");
    if (!round)
        return round.error();
    r.round = *round;
    if (type != request::kGenerate)
        return r;
    auto prompt = requiredText(body, "prompt");
    auto temperature = optionalNumber(body, "temperature", 0, 10);
    auto topK = optionalInt(body, "top_k", 0, 1'000'000);
    auto maxTokens = optionalInt(body, "max_tokens", 1, 4096);
    if (!prompt)
        return prompt.error();
    for (const Error* e : {temperature ? nullptr : &temperature.error(), topK ? nullptr : &topK.error(),
             maxTokens ? nullptr : &maxTokens.error()})
        if (e)
            return *e;
    r.generate.prompt = *prompt;
    r.generate.temperature = temperature->value_or(0.8);
    r.generate.topK = topK->value_or(200);
    r.generate.maxTokens = maxTokens->value_or(200);
    return r;
}

void addQuickRequests(RequestTable& table, const RequestParts& p)
{
    table.add(request::kStatus, [p](const Value&) -> Result<Planned> { return now(p.status); });
    table.add(request::kSettingsGet,
        [p](const Value&) -> Result<Planned> { return now([p] { return p.settings.describe(); }); });
    table.add(request::kMetrics, [p](const Value& body) -> Result<Planned> {
        auto since = optionalUInt(body, "since_round");
        if (!since)
            return since.error();
        return now([p, since = since->value_or(0)]() -> Result<Value> {
            Value v = Value::map();
            v.set("project", p.joined.joined().project).set("rows", p.history.metrics(since));
            return v;
        });
    });
    table.add(request::kMachineHistory,
        [p](const Value&) -> Result<Planned> { return now([p] { return p.history.machineRows(); }); });
    table.add(request::kLog, [p](const Value&) -> Result<Planned> { return now([p] { return p.log.lines(); }); });
    table.add(request::kCatalog, [p](const Value& body) -> Result<Planned> {
        auto refresh = optionalBool(body, "refresh");
        if (!refresh)
            return refresh.error();
        auto answer = [p, refresh = refresh->value_or(false)]() -> Result<Value> {
            if (refresh)
                p.hubs.refresh(2000);
            const JoinedProject::Joined joined = p.joined.joined();
            return catalogValue(p.hubs, joined.hub, joined.project);
        };
        return refresh->value_or(false) ? reads(answer) : now(answer);
    });
    table.add(request::kContributions, [p](const Value&) -> Result<Planned> {
        return reads([p]() -> Result<Value> {
            const JoinedProject::Joined joined = p.joined.joined();
            if (!joined.runner)
                return Error::make(control::errc::kNotJoined, "join a project to see contributions");
            return contributionsOf(p.hubs, joined.runner->hub, joined.project);
        });
    });
}

void addChangeRequests(RequestTable& table, const RequestParts& p)
{
    table.add(request::kSettingsSet, [p](const Value& body) -> Result<Planned> {
        auto key = requiredText(body, "key");
        if (!key)
            return key.error();
        return changes([p, key = *key, value = body["value"]]() -> Result<Value> {
            auto set = p.settings.set(key, value);
            if (set)
                p.log.log("setting " + key + " = " + value.toJson());
            return set;
        });
    });
    table.add(request::kFollow, [p](const Value& body) -> Result<Planned> {
        auto hub = linkOf(body);
        if (!hub)
            return hub.error();
        return changes([p, hub = *hub]() -> Result<Value> {
            p.hubs.follow(hub);
            if (Status s = p.joined.persist(); !s)
                return s.error();
            p.hubs.refreshOne(formatHubLink(hub), 2000);
            Value v = Value::map();
            v.set("link", formatHubLink(hub));
            return v;
        });
    });
    table.add(request::kUnfollow, [p](const Value& body) -> Result<Planned> {
        auto hub = linkOf(body);
        if (!hub)
            return hub.error();
        return changes([p, hub = *hub]() -> Result<Value> {
            if (!p.hubs.unfollow(formatHubLink(hub)))
                return Error::make(control::errc::kNotFound, "this hub is not followed: " + formatHubLink(hub));
            if (Status s = p.joined.persist(); !s)
                return s.error();
            return Value::map();
        });
    });
    table.add(request::kJoin, [p](const Value& body) -> Result<Planned> {
        auto hub = hubTextOf(body);
        if (!hub)
            return hub.error();
        auto project = requiredName(body, "project");
        if (!project)
            return project.error();
        return changes([p, hub = *hub, project = *project]() -> Result<Value> {
            if (Status s = p.joined.join(hub, project); !s)
                return s.error();
            return p.status();
        });
    });
    table.add(
        request::kLeave, [p](const Value&) -> Result<Planned> { return changes([p] { return p.joined.leave(); }); });
    table.add(request::kPause,
        [p](const Value&) -> Result<Planned> { return changes([p] { return p.joined.pause(true); }); });
    table.add(request::kResume,
        [p](const Value&) -> Result<Planned> { return changes([p] { return p.joined.pause(false); }); });
    table.add(request::kSnooze, [p](const Value& body) -> Result<Planned> {
        auto seconds = optionalInt(body, "seconds", 1, 7 * 24 * 3600);
        if (!seconds)
            return seconds.error();
        return changes([p, s = seconds->value_or(3600)] { return p.joined.snooze(s); });
    });
}

} // namespace

void addDaemonRequests(RequestTable& table, const RequestParts& parts)
{
    addQuickRequests(table, parts);
    addChangeRequests(table, parts);
    for (std::string_view type : {request::kCheckpoints, request::kDownload, request::kDownloadPause,
             request::kDownloadResume, request::kDownloadCancel, request::kCheckpointDelete, request::kGenerate})
        table.add(type, [parts, type](const Value& body) -> Result<Planned> {
            auto r = checkpointFields(type, body);
            if (!r)
                return r.error();
            auto work = [parts, r = *r] { return runCheckpointRequest(parts, r); };
            return type == request::kCheckpoints ? reads(work) : changes(work);
        });
}

} // namespace crowdtrain::daemon
