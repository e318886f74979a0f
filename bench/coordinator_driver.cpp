#include "bench/coordinator_driver.h"

#include <random>
#include <sys/epoll.h>

namespace crowdtrain::bench {

namespace {
constexpr const char* kProject = "tiny";
constexpr int64_t kSweepNs = 50'000'000; // drain every socket this often, in case a ZMQ_FD edge was missed
} // namespace

Driver::Driver(zmq::context_t& context, Shared& shared, const BenchOptions& options, int firstIndex, int count)
    : m_context(context)
    , m_shared(shared)
    , m_options(options)
    , m_volunteers(std::size_t(count))
{
    m_epoll = ::epoll_create1(EPOLL_CLOEXEC);
    const int trainEvery = options.trainerFraction > 0 ? std::max(1, int(1.0 / options.trainerFraction)) : 0;
    for (int i = 0; i < count; ++i) {
        Volunteer& v = m_volunteers[std::size_t(i)];
        auto keys = net::generateKeyPair();
        if (!keys) {
            std::fprintf(stderr, "keys: %s\n", keys.error().message.c_str());
            std::exit(1);
        }
        v.keys = *keys;
        v.trainer = trainEvery > 0 && (firstIndex + i) % trainEvery == 0;
        v.payload = std::size_t(firstIndex + i) % std::max<std::size_t>(1, shared.facts.payloads.size());
    }
}

Driver::~Driver()
{
    m_volunteers.clear(); // sockets close before the context goes
    if (m_epoll >= 0)
        ::close(m_epoll);
}

void Driver::error(Kind kind, const std::string& code)
{
    ++m_stats.errors;
    ++m_stats.errorCodes[std::string(kKindNames[int(kind)]) + ": " + code];
}

template <typename Request> void Driver::send(uint32_t v, Kind kind, const Request& request)
{
    const uint64_t id = ++m_nextId;
    const std::string bytes = net::encodeRequest(request, id);
    try {
        if (!m_volunteers[v].socket.send(zmq::buffer(bytes), zmq::send_flags::dontwait)) {
            error(kind, "send_would_block");
            return;
        }
    } catch (const zmq::error_t& e) {
        error(kind, std::string("send: ") + e.what());
        return;
    }
    m_pending.emplace(id, Pending{v, kind, nowNs()});
    drain(v); // a send can consume the ZMQ_FD signal of a reply already waiting
}

void Driver::startJoin(uint32_t v)
{
    Volunteer& vol = m_volunteers[v];
    auto socket = net::makeCurveClientSocket(
        m_context, zmq::socket_type::dealer, m_shared.serverKey, vol.keys, m_shared.endpoint);
    if (!socket) {
        std::fprintf(stderr, "socket: %s\n", socket.error().message.c_str());
        std::exit(1);
    }
    vol.socket = std::move(*socket);
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.u32 = v;
    ::epoll_ctl(m_epoll, EPOLL_CTL_ADD, vol.socket.get(zmq::sockopt::fd), &event);
    ++m_joinsInFlight;
    send(v, Kind::Join, net::JoinRequest{kProject, "sim-" + std::to_string(v), "bench", "CPU"});
}

void Driver::drain(uint32_t v)
{
    zmq::socket_t& socket = m_volunteers[v].socket;
    if (!socket.handle())
        return;
    while (socket.get(zmq::sockopt::events) & ZMQ_POLLIN) {
        zmq::message_t reply;
        if (!socket.recv(reply, zmq::recv_flags::dontwait))
            break;
        onReply(v, reply.to_string_view());
    }
}

void Driver::askForTask(uint32_t v)
{
    Volunteer& vol = m_volunteers[v];
    vol.phase = Phase::Asking;
    send(v, Kind::GetTask, net::GetTaskRequest{kProject, vol.session, vol.version});
}

void Driver::sendChunk(uint32_t v, uint64_t index)
{
    Volunteer& vol = m_volunteers[v];
    const std::string& payload = m_shared.facts.payloads[vol.payload];
    const uint64_t chunk = m_shared.facts.chunkBytes;
    send(v, Kind::Upload,
        net::UploadChunkRequest{kProject, vol.session, vol.task.taskId, index, payload.substr(index * chunk, chunk)});
}

void Driver::sendSubmit(uint32_t v, uint64_t chunks)
{
    Volunteer& vol = m_volunteers[v];
    const ProjectFacts& f = m_shared.facts;
    vol.phase = Phase::Submitting;
    send(v, Kind::Submit,
        net::SubmitRequest{kProject, vol.session, vol.task.taskId, vol.task.round, vol.task.version, f.taskTokens,
            uint64_t(m_options.computeMs), 3.5, "int8", f.elements, f.payloads[vol.payload].size(), chunks,
            f.sha256[vol.payload]});
}

void Driver::onReply(uint32_t v, std::string_view bytes)
{
    const int64_t now = nowNs();
    auto envelope = net::decodeEnvelope(bytes, net::EnvelopeKind::Reply);
    if (!envelope) {
        error(Kind::Heartbeat, "undecodable reply");
        return;
    }
    auto it = m_pending.find(envelope->id);
    if (it == m_pending.end())
        return;
    const Pending pending = it->second;
    m_pending.erase(it);
    const int64_t start = m_shared.windowStartNs.load(), end = m_shared.windowEndNs.load();
    const bool inWindow = pending.sentNs >= start && pending.sentNs < end;
    if (inWindow)
        ++m_stats.repliesInWindow;
    if (inWindow || pending.kind == Kind::Join)
        m_stats.latencies[int(pending.kind)].push_back(double(now - pending.sentNs) / 1e6);

    Volunteer& vol = m_volunteers[v];
    const bool failed = envelope->type == net::kErrorType;
    if (failed)
        error(pending.kind, net::errorFromReply(*envelope).code);
    switch (pending.kind) {
    case Kind::Join: {
        --m_joinsInFlight;
        m_shared.joinsAnswered.fetch_add(1);
        auto reply = net::decodeReplyBody<net::JoinReply>(*envelope);
        if (!reply)
            return;
        vol.joined = true;
        vol.session = reply->session;
        vol.version = reply->version;
        thread_local std::mt19937 rng{v};
        const int64_t offset = int64_t(rng() % uint32_t(m_options.heartbeatMs)) * 1'000'000;
        m_timers.push({now + offset, v, Action::Heartbeat});
        return;
    }
    case Kind::Heartbeat: {
        auto reply = net::decodeReplyBody<net::HeartbeatReply>(*envelope);
        if (!reply)
            return;
        vol.version = reply->version;
        int64_t seen = m_shared.maxVersion.load();
        while (int64_t(reply->version) > seen && !m_shared.maxVersion.compare_exchange_weak(seen, reply->version)) { }
        if (vol.trainer && vol.phase == Phase::Idle && reply->state == net::kStateTrain)
            askForTask(v);
        return;
    }
    case Kind::GetTask: {
        auto reply = net::decodeReplyBody<net::GetTaskReply>(*envelope);
        if (!reply || !reply->task) {
            vol.phase = Phase::Idle; // wait for the next heartbeat
            return;
        }
        vol.task = *reply->task;
        vol.phase = Phase::Computing;
        m_timers.push({now + int64_t(m_options.computeMs) * 1'000'000, v, Action::Upload});
        return;
    }
    case Kind::Upload: {
        auto reply = net::decodeReplyBody<net::UploadChunkReply>(*envelope);
        if (!reply) {
            vol.phase = Phase::Idle;
            return;
        }
        if (reply->receivedBytes < m_shared.facts.payloads[vol.payload].size())
            sendChunk(v, reply->nextIndex);
        else
            sendSubmit(v, reply->nextIndex);
        return;
    }
    case Kind::Submit:
        if (failed) {
            vol.phase = Phase::Idle;
            return;
        }
        ++m_stats.accepted;
        askForTask(v); // as a worker does: straight on to the next task
        return;
    }
}

void Driver::onTimer(const Timer& timer)
{
    Volunteer& vol = m_volunteers[timer.volunteer];
    if (timer.action == Action::Heartbeat) {
        // Open loop: the next beat is due one interval after this one, whatever the reply.
        m_timers.push({timer.dueNs + int64_t(m_options.heartbeatMs) * 1'000'000, timer.volunteer, Action::Heartbeat});
        send(timer.volunteer, Kind::Heartbeat, net::HeartbeatRequest{kProject, vol.session, vol.version});
        return;
    }
    vol.phase = Phase::Uploading;
    sendChunk(timer.volunteer, 0);
}

void Driver::run()
{
    std::vector<epoll_event> events(256);
    int64_t lastSweep = nowNs();
    while (!m_shared.stop.load()) {
        while (m_joinsInFlight < m_options.joinsInFlight && m_nextJoin < m_volunteers.size())
            startJoin(m_nextJoin++);
        int64_t now = nowNs();
        while (!m_timers.empty() && m_timers.top().dueNs <= now) {
            const Timer timer = m_timers.top();
            m_timers.pop();
            onTimer(timer);
        }
        int timeoutMs = 5;
        if (!m_timers.empty())
            timeoutMs = int(std::clamp<int64_t>((m_timers.top().dueNs - now) / 1'000'000, 0, 5));
        const int ready = ::epoll_wait(m_epoll, events.data(), int(events.size()), timeoutMs);
        for (int i = 0; i < ready; ++i)
            drain(events[std::size_t(i)].data.u32);
        now = nowNs();
        if (now - lastSweep > kSweepNs) {
            lastSweep = now;
            for (uint32_t v = 0; v < m_nextJoin; ++v)
                drain(v);
        }
    }
    const int64_t start = m_shared.windowStartNs.load(), end = m_shared.windowEndNs.load();
    for (const auto& [id, pending] : m_pending)
        if (pending.sentNs >= start && pending.sentNs < end)
            ++m_stats.unanswered;
}

} // namespace crowdtrain::bench
