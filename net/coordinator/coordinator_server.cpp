#include "net/coordinator/coordinator_server.h"

#include "core/clock.h"
#include "core/slow_work.h"
#include "net/coordinator/project_runtime.h"
#include "net/transfer/resource_table.h"
#include "net/transport/curve_socket.h"
#include "net/wire/error_codes.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <utility>

namespace crowdtrain::coordinator {

CoordinatorServer::CoordinatorServer(ServerOptions options)
    : m_options(std::move(options))
{ }

CoordinatorServer::~CoordinatorServer()
{
    m_router.close();
    m_pub.close();
    m_zap.reset();
}

Result<std::unique_ptr<CoordinatorServer>> CoordinatorServer::start(
    ServerOptions options, std::vector<ProjectSpec> projects)
{
    if (projects.empty())
        return Error::make(net::errc::kBadOptions, "no project to serve");
    std::unique_ptr<CoordinatorServer> server(new CoordinatorServer(std::move(options)));
    if (server->m_options.swarm) {
        auto session = swarm::SwarmSession::start(*server->m_options.swarm);
        if (!session)
            return Error::make(session.error().code, "the checkpoint swarm: " + session.error().message);
        server->m_swarm = std::move(*session);
        server->m_options.runtime.swarm = server->m_swarm.get();
    }
    const int64_t now = core::unixNowMs();
    for (ProjectSpec& spec : projects) {
        const std::string name = spec.name;
        if (server->m_projects.contains(name))
            return Error::make(net::errc::kBadOptions, "project " + name + " is listed twice");
        auto runtime
            = ProjectRuntime::open(std::move(spec), server->m_options.stateDir / name, server->m_options.runtime, now);
        if (!runtime)
            return Error::make(runtime.error().code, name + ": " + runtime.error().message);
        server->m_projects.emplace(name, std::move(*runtime));
    }
    auto zap = net::ZapAuthenticator::start(server->m_context);
    if (!zap)
        return zap.error();
    server->m_zap = std::move(*zap);
    // The transport's hard cap sits above the protocol's limit, so that a
    // request a little too big is answered "too_large" rather than cut off.
    auto router = net::makeCurveServerSocket(server->m_context, zmq::socket_type::router, server->m_options.keys,
        server->m_options.bindEndpoint, int64_t(net::kMaxRequestBytes) * 2);
    if (!router)
        return router.error();
    server->m_router = std::move(*router);
    auto pub = net::makeCurveServerSocket(
        server->m_context, zmq::socket_type::pub, server->m_options.keys, server->m_options.publishEndpoint);
    if (!pub)
        return pub.error();
    server->m_pub = std::move(*pub);
    // Joiners learn the PUB port (they connect to the host they reached).
    const std::string events = net::lastEndpoint(server->m_pub);
    uint64_t port = 0;
    if (events.starts_with("tcp://") && events.rfind(':') != std::string::npos)
        port = std::strtoull(events.c_str() + events.rfind(':') + 1, nullptr, 10);
    for (auto& [name, runtime] : server->m_projects)
        runtime->setEventsPort(port <= 65535 ? port : 0);
    return server;
}

std::string CoordinatorServer::requestEndpoint() const
{
    return net::lastEndpoint(m_router);
}
std::string CoordinatorServer::publishEndpoint() const
{
    return net::lastEndpoint(m_pub);
}

Status CoordinatorServer::run()
{
    auto lastTick = std::chrono::steady_clock::now();
    while (!m_stop.load()) {
        zmq::pollitem_t items[] = {{m_router.handle(), 0, ZMQ_POLLIN, 0}};
        // Work on a project's worker that someone waits for is collected
        // sooner than at the tick's period.
        const bool working
            = std::any_of(m_projects.begin(), m_projects.end(), [](const auto& p) { return p.second->working(); });
        try {
            zmq::poll(items, 1, std::chrono::milliseconds(working ? std::min(m_options.tickMs, 5) : m_options.tickMs));
        } catch (const zmq::error_t& e) {
            if (e.num() == EINTR)
                continue;
            return Error::make(net::errc::kPollFailed, std::string("polling the request socket failed: ") + e.what());
        }
        // Drain what is waiting, then tick; a flood cannot starve the rounds
        // for long because each request is short.
        for (int i = 0; i < 1000; ++i) {
            auto request = net::receiveRequest(m_router);
            if (!request)
                break;
            m_route = &request->route;
            m_replyLater = false;
            const std::string reply
                = handle(request->payload, request->peerKey, core::unixNowMs(), request->peerAddress);
            m_route = nullptr;
            if (std::exchange(m_replyLater, false))
                continue;
            // Counted as sent only once the socket took them.
            const auto [checkpointBytes, stateBytes] = std::exchange(m_replyChunkBytes, {});
            if (net::sendReply(m_router, request->route, reply)) {
                m_checkpointChunkBytes += checkpointBytes;
                m_stateChunkBytes += stateBytes;
            } else {
                ++m_droppedReplies;
            }
        }
        // A round to wrap up or close is not left for the next period.
        const auto now = std::chrono::steady_clock::now();
        const bool due = std::any_of(
            m_projects.begin(), m_projects.end(), [](const auto& project) { return project.second->tickDue(); });
        if (due || working || now - lastTick >= std::chrono::milliseconds(m_options.tickMs)) {
            lastTick = now;
            tickProjects();
        }
    }
    return Status::success();
}

// A project's tick changes nothing it has not committed when it throws (the
// round stays open, accepted submissions stay on disk), so the next period
// simply tries again; one project's failure never stops the others.
void CoordinatorServer::tickProjects()
{
    for (auto& [name, runtime] : m_projects) {
        try {
            const int64_t now = core::unixNowMs();
            const core::SlowWork slow("the tick of ", name);
            publish(runtime->tick(now));
            if (m_tickObserver)
                m_tickObserver(*runtime, now);
        } catch (const std::exception& e) {
            const uint64_t failures = ++m_failedTicks;
            std::fprintf(stderr, "%s: tick failed (%llu so far), trying again: %s\n", name.c_str(),
                static_cast<unsigned long long>(failures), e.what());
        }
    }
}

void CoordinatorServer::publish(const PublishedEvents& events)
{
    for (const net::EventFrames& frames : events.frames) {
        try {
            m_pub.send(zmq::buffer(frames.topic), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
            m_pub.send(zmq::buffer(frames.body), zmq::send_flags::dontwait);
        } catch (const zmq::error_t&) {
            // PUB never blocks; a full queue drops the event for slow subscribers.
        }
    }
}

ProjectRuntime* CoordinatorServer::project(const std::string& name)
{
    auto it = m_projects.find(name);
    return it == m_projects.end() ? nullptr : it->second.get();
}

std::string CoordinatorServer::handle(
    std::string_view request, const std::string& peerKey, int64_t nowMs, const std::string& peerAddress)
{
    if (request.size() > net::kMaxRequestBytes)
        return net::encodeErrorReply(net::bestEffortRequestId(request),
            Error::make(net::errc::kTooLarge,
                "request of " + std::to_string(request.size()) + " bytes exceeds the limit of "
                    + std::to_string(net::kMaxRequestBytes)));
    auto envelope = net::decodeEnvelope(request, net::EnvelopeKind::Request);
    if (!envelope)
        return net::encodeErrorReply(net::bestEffortRequestId(request), envelope.error());
    try {
        const core::SlowWork slow("a request of type ", envelope->type);
        auto reply = dispatch(*envelope, peerKey, nowMs, peerAddress);
        if (!reply)
            return net::encodeErrorReply(envelope->id, net::protocolError(reply.error()));
        return std::move(*reply);
    } catch (const std::exception& e) {
        // A bug, not the peer's fault; nothing was half-applied (handlers
        // validate first), so say so and carry on serving.
        return net::encodeErrorReply(envelope->id, Error::make(net::errc::kInternal, e.what()));
    }
}

namespace {

// Decodes the body as Request, finds its project, and calls `handler`.
template <typename Request, typename Handler>
Result<std::string> serve(const net::Envelope& envelope, const std::function<ProjectRuntime*(const std::string&)>& find,
    const std::string& peerKey, int64_t nowMs, Handler handler)
{
    auto request = net::decodeBody<Request>(envelope);
    if (!request)
        return request.error();
    ProjectRuntime* runtime = find(request->project);
    if (!runtime)
        return Error::make(net::errc::kUnknownProject, "no project named \"" + request->project + "\" here");
    runtime->touch(peerKey, nowMs);
    auto reply = handler(*runtime, *request);
    if (!reply)
        return reply.error();
    return net::encodeReply(*reply, envelope.id);
}

} // namespace

Result<std::string> CoordinatorServer::dispatch(
    const net::Envelope& e, const std::string& key, int64_t now, const std::string& address)
{
    using namespace net;
    const std::function<ProjectRuntime*(const std::string&)> find
        = [this](const std::string& name) { return project(name); };
    const std::string& type = e.type;
    if (type == ListProjectsRequest::kType) {
        if (auto request = decodeBody<ListProjectsRequest>(e); !request)
            return request.error();
        ListProjectsReply reply;
        for (const auto& [name, runtime] : m_projects)
            reply.projects.push_back(runtime->info());
        return encodeReply(reply, e.id);
    }
    if (type == JoinRequest::kType)
        return serve<JoinRequest>(
            e, find, key, now, [&](ProjectRuntime& p, const JoinRequest& r) { return p.join(key, r, now); });
    if (type == HeartbeatRequest::kType)
        return serve<HeartbeatRequest>(
            e, find, key, now, [&](ProjectRuntime& p, const HeartbeatRequest& r) { return p.heartbeat(key, r); });
    if (type == LeaveRequest::kType)
        return serve<LeaveRequest>(
            e, find, key, now, [&](ProjectRuntime& p, const LeaveRequest& r) { return p.leave(key, r); });
    // A task is handed out once its record is durable (a restart keeps
    // it): the reply waits for the write, the loop does not.
    if (type == GetTaskRequest::kType)
        return serveLater<GetTaskRequest, GetTaskReply>(
            e, key, now,
            [&](ProjectRuntime& p, const GetTaskRequest& r, ProjectRuntime::GetTaskDone done) {
                p.getTask(key, r, now, std::move(done));
            },
            [&](ProjectRuntime& p) { p.finishRecords(now); });
    if (type == UploadChunkRequest::kType)
        return serve<UploadChunkRequest>(e, find, key, now,
            [&](ProjectRuntime& p, const UploadChunkRequest& r) { return p.uploadChunk(key, r, now); });
    // A submit's verdict comes at once (a refusal, a repeat) or from a
    // later tick, once its acceptance is durable.
    if (type == SubmitRequest::kType)
        return serveLater<SubmitRequest, SubmitReply>(
            e, key, now,
            [&](ProjectRuntime& p, const SubmitRequest& r, Submissions::SubmitDone done) {
                p.submit(key, r, now, std::move(done));
            },
            [](ProjectRuntime& p) { p.finishAccepting(); });
    if (type == GetUpdateRequest::kType)
        return serve<GetUpdateRequest>(e, find, key, now,
            [&](ProjectRuntime& p, const GetUpdateRequest& r) { return p.downloads().getUpdate(r); });
    if (type == ListCheckpointsRequest::kType)
        return serve<ListCheckpointsRequest>(e, find, key, now,
            [&](ProjectRuntime& p, const ListCheckpointsRequest&) { return p.downloads().listCheckpoints(key); });
    if (type == MetricsRequest::kType)
        return serve<MetricsRequest>(
            e, find, key, now, [&](ProjectRuntime& p, const MetricsRequest& r) { return p.queries().metrics(r); });
    if (type == LeaderboardRequest::kType)
        return serve<LeaderboardRequest>(e, find, key, now,
            [&](ProjectRuntime& p, const LeaderboardRequest& r) { return p.queries().leaderboard(r); });
    if (type == SwarmPeersRequest::kType)
        return serve<SwarmPeersRequest>(e, find, key, now, [&](ProjectRuntime& p, const SwarmPeersRequest& r) {
            return p.downloads().swarmPeers(key, r, address, now);
        });
    if (type == MyStatsRequest::kType)
        return serve<MyStatsRequest>(
            e, find, key, now, [&](ProjectRuntime& p, const MyStatsRequest&) { return p.myStats(key); });
    if (type == DescribeRequest::kType || type == FetchRequest::kType) {
        Result<std::string> projectName = Error::make(net::errc::kMalformed, "body");
        if (type == DescribeRequest::kType) {
            auto request = decodeBody<DescribeRequest>(e);
            projectName = request ? Result<std::string>(request->project) : Result<std::string>(request.error());
        } else {
            auto request = decodeBody<FetchRequest>(e);
            projectName = request ? Result<std::string>(request->project) : Result<std::string>(request.error());
        }
        if (!projectName)
            return projectName.error();
        ProjectRuntime* runtime = project(*projectName);
        if (!runtime)
            return Error::make(net::errc::kUnknownProject, "no project named \"" + *projectName + "\" here");
        runtime->touch(key, now);
        std::string name;
        if (type == DescribeRequest::kType) {
            if (auto request = decodeBody<DescribeRequest>(e))
                name = request->resource;
        } else if (auto request = decodeBody<FetchRequest>(e)) {
            name = request->resource;
        }
        if (Status allowed = runtime->downloads().prepare(key, name); !allowed)
            return allowed.error();
        if (type == FetchRequest::kType)
            runtime->downloads().noteDownload(name, now);
        auto reply = handleTransferRequest(runtime->downloads().resources(), e);
        if (!reply)
            return Error::make(net::errc::kUnknownType, "not a transfer request");
        if (type == FetchRequest::kType && name.starts_with("checkpoint/"))
            m_replyChunkBytes.first = reply->size();
        else if (type == FetchRequest::kType && name.starts_with("state-v"))
            m_replyChunkBytes.second = reply->size();
        return std::move(*reply);
    }
    return Error::make(net::errc::kUnknownType, "no request type \"" + type + "\" in protocol version 1");
}

// A reply that may come from a later tick: `start` is handed the function
// that answers, which it calls at once (this returns the reply) or later
// (the request's route is kept and the reply sent from there). Outside
// run(), with no route to keep, `finish` waits for the answer.
template <typename Request, typename Reply>
Result<std::string> CoordinatorServer::serveLater(const net::Envelope& e, const std::string& key, int64_t now,
    const std::function<void(ProjectRuntime&, const Request&, std::function<void(Result<Reply>)>)>& start,
    const std::function<void(ProjectRuntime&)>& finish)
{
    auto request = net::decodeBody<Request>(e);
    if (!request)
        return request.error();
    ProjectRuntime* runtime = project(request->project);
    if (!runtime)
        return Error::make(net::errc::kUnknownProject, "no project named \"" + request->project + "\" here");
    runtime->touch(key, now);
    struct Answer {
        std::optional<std::string> bytes; // when it came before the route was kept
        std::optional<std::vector<zmq::message_t>> route;
    };
    auto answer = std::make_shared<Answer>();
    start(*runtime, *request, [this, answer, id = e.id](Result<Reply> reply) {
        std::string bytes
            = reply ? net::encodeReply(*reply, id) : net::encodeErrorReply(id, net::protocolError(reply.error()));
        if (!answer->route)
            answer->bytes = std::move(bytes);
        else if (!net::sendReply(m_router, *answer->route, bytes))
            ++m_droppedReplies;
    });
    if (!answer->bytes && !m_route) {
        finish(*runtime);
        if (!answer->bytes)
            return Error::make(net::errc::kUnavailable, "the round is being closed: ask again");
    }
    if (answer->bytes)
        return std::move(*answer->bytes);
    answer->route = std::move(*m_route);
    m_replyLater = true;
    return std::string();
}

} // namespace crowdtrain::coordinator
