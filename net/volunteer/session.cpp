#include "net/volunteer/session.h"

#include "core/thread_name.h"
#include "core/thread_priority.h"
#include "net/wire/error_codes.h"

#include <future>

namespace crowdtrain::volunteer {

Session::Session(zmq::context_t& context, net::CurveKeyPair keys, SessionOptions options, const std::atomic<bool>& stop,
    Reporter& reporter, JoinCheck check)
    : m_context(context)
    , m_keys(std::move(keys))
    , m_options(std::move(options))
    , m_stop(stop)
    , m_reporter(reporter)
    , m_check(std::move(check))
{
    m_traffic.throttle = m_options.throttle;
}

Session::~Session() = default;

int Session::controlTimeoutMs() const
{
    return int(std::max<uint64_t>(1000, m_intervalMs * m_liveness));
}

int Session::transferTimeoutMs() const
{
    return std::max(10000, 2 * controlTimeoutMs());
}

int Session::submitTimeoutMs() const
{
    return std::max(kSubmitAnswerMs, transferTimeoutMs());
}

std::unique_ptr<ConnectionSource> Session::resources()
{
    if (!m_connection)
        return nullptr;
    return std::make_unique<ConnectionSource>(*m_connection, m_options.project, transferTimeoutMs());
}

Status Session::join()
{
    if (!m_connection) {
        net::ClientOptions options;
        options.endpoint = m_options.endpoint;
        options.serverPublicKey = m_options.serverKey;
        options.keys = m_keys;
        auto connection = Connection::open(m_context, std::move(options), m_traffic, &m_stop);
        if (!connection)
            return connection.error();
        m_connection = std::move(*connection);
    }
    net::JoinRequest request;
    request.project = m_options.project;
    request.displayName = m_options.displayName;
    request.clientVersion = m_options.clientVersion;
    request.device = m_options.device;
    auto reply = m_connection->call<net::JoinReply>(request, controlTimeoutMs());
    if (!reply)
        return reply.error();
    if (m_check)
        if (Status checked = m_check(*reply); !checked)
            return checked;
    m_join = std::move(*reply);
    m_serverVersion = m_join.version;
    m_intervalMs = std::clamp(m_join.heartbeatIntervalMs, net::kMinHeartbeatIntervalMs, net::kMaxHeartbeatIntervalMs);
    m_liveness = std::clamp(m_join.heartbeatLiveness, net::kMinHeartbeatLiveness, net::kMaxHeartbeatLiveness);
    m_missed = Liveness(m_liveness);
    m_nextBeat = Clock::now() + std::chrono::milliseconds(m_intervalMs);
    m_joined = true;
    m_backoff.reset();
    m_nextAttempt = Clock::now();
    listenForEvents();
    m_reporter.log("joined %s at %s: version %llu, codec %s, H=%llu, heartbeat %llu ms", m_options.project.c_str(),
        m_options.endpoint.c_str(), static_cast<unsigned long long>(m_join.version), m_join.codec.c_str(),
        static_cast<unsigned long long>(m_join.inner.steps), static_cast<unsigned long long>(m_intervalMs));
    m_everJoined = true;
    return Status::success();
}

Status Session::rejoinWhenDue()
{
    if (Clock::now() < m_nextAttempt)
        return Error::make(net::errc::kTimeout, "the next attempt to join is not due yet");
    Status joined = join();
    if (joined)
        return joined;
    const uint64_t delayMs = m_backoff.nextDelayMs();
    m_nextAttempt = Clock::now() + std::chrono::milliseconds(delayMs);
    m_reporter.log("cannot join %s: %s; retrying in %.1f s", m_options.endpoint.c_str(), joined.error().message.c_str(),
        double(delayMs) / 1e3);
    // A fresh socket for the next attempt: nothing queued in this one can
    // reach a coordinator that comes back.
    m_connection.reset();
    return joined;
}

Result<std::optional<net::HeartbeatReply>> Session::beat(uint64_t heldVersion)
{
    if (!m_joined)
        return Error::make(net::errc::kNotJoined, "not joined");
    m_nextBeat = Clock::now() + std::chrono::milliseconds(m_intervalMs);
    net::HeartbeatRequest request{m_options.project, m_join.session, heldVersion};
    ++m_traffic.heartbeats;
    auto reply = m_connection->call<net::HeartbeatReply>(request, int(m_intervalMs));
    if (reply) {
        m_missed.answered();
        m_serverVersion = reply->version;
        return std::optional<net::HeartbeatReply>(std::move(*reply));
    }
    if (reply.error().code == net::errc::kNotJoined) {
        m_reporter.log("the coordinator no longer knows this session; joining again");
        m_joined = false;
        return reply.error();
    }
    if (isConnectionError(reply.error()) && reply.error().code != net::errc::kCancelled) {
        if (!m_missed.missed())
            return std::optional<net::HeartbeatReply>();
        disconnect(reply.error().message);
    }
    return reply.error();
}

std::optional<net::HeartbeatReply> Session::keepAlive(uint64_t heldVersion)
{
    if (m_stop.load())
        return std::nullopt;
    if (!m_joined) {
        (void)rejoinWhenDue();
        return std::nullopt;
    }
    if (Clock::now() < m_nextBeat)
        return std::nullopt;
    auto reply = beat(heldVersion);
    if (!reply || !*reply)
        return std::nullopt;
    return std::move(**reply);
}

void Session::disconnect(const std::string& why)
{
    if (m_joined) {
        if (!why.empty())
            m_reporter.log("lost the coordinator (%s); reconnecting", why.c_str());
        ++m_reconnects;
    }
    m_joined = false;
    m_connection.reset();
}

void Session::leave()
{
    if (!m_joined || !m_connection)
        return;
    auto reply = m_connection->call<net::LeaveReply>(
        net::LeaveRequest{m_options.project, m_join.session}, 1000, /*cancellable=*/false);
    if (reply)
        m_reporter.log("left %s", m_options.project.c_str());
    m_joined = false;
}

void Session::listenForEvents()
{
    const auto endpoint = EventListener::endpointFor(m_options.endpoint, m_join.eventsPort);
    if (!endpoint) {
        m_events.reset();
        return;
    }
    if (m_events && m_events->endpoint() == *endpoint)
        return;
    auto listener = EventListener::open(m_context, *endpoint, m_options.serverKey, m_keys, m_options.project);
    if (!listener) {
        m_reporter.log("no events from %s: %s", endpoint->c_str(), listener.error().message.c_str());
        m_events.reset();
        return;
    }
    m_events.emplace(std::move(*listener));
}

Status Session::whileAlive(const std::function<Status()>& work, uint64_t heldVersion)
{
    // The work on a thread of its own, at the lowest priority
    // (core::asIdleWork); this one keeps the session alive meanwhile.
    auto done = std::async(std::launch::async, [&work] {
        core::nameThisThread("idle-work");
        core::asIdleWork();
        return work();
    });
    while (done.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready)
        keepAlive(heldVersion);
    return done.get();
}

} // namespace crowdtrain::volunteer
