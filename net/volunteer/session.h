#pragma once

// The volunteer's connection and session with one coordinator, the zguide's
// Paranoid Pirate worker written once (docs/protocol.md, section 8): the
// Curve connection, the join and its reply, heartbeats with their liveness
// count, the reconnect schedule with exponential backoff, and the
// subscription to the project's events. Everything that talks to the
// coordinator goes through it; every wait in it ends within 50 ms of the
// agent's stop flag being set.
//
// One owner (AgentLoop), used on run()'s thread only.

#include "net/transport/curve_keys.h"
#include "net/volunteer/backoff.h"
#include "net/volunteer/connection.h"
#include "net/volunteer/event_listener.h"
#include "net/volunteer/reporter.h"
#include "net/wire/error_codes.h"
#include "net/wire/messages.h"

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>

namespace crowdtrain::volunteer {

struct SessionOptions {
    std::string endpoint; // tcp://host:port
    std::string serverKey; // Z85
    std::string project;
    std::string displayName;
    std::string device;
    std::string clientVersion;
    std::shared_ptr<limits::NetworkThrottle> throttle; // may be null: no network limits
};

class Session {
public:
    using Clock = std::chrono::steady_clock;
    // Judges a join reply before the session takes it (the model, codec and
    // manifest this worker can use).
    using JoinCheck = std::function<Status(const net::JoinReply&)>;

    Session(zmq::context_t& context, net::CurveKeyPair keys, SessionOptions options, const std::atomic<bool>& stop,
        Reporter& reporter, JoinCheck check);
    ~Session();
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;

    // Connects when needed and joins (a re-join keeps any task in hand).
    Status join();
    // join() once the backoff allows another attempt: a failure schedules
    // the next one (2x longer, capped) and is returned; before the next
    // attempt is due it returns "timeout" without trying. A success resets
    // the schedule.
    Status rejoinWhenDue();
    Clock::time_point nextAttempt() const { return m_nextAttempt; }

    // One heartbeat with the Paranoid Pirate bookkeeping: a reply resets the
    // miss count (and carries the server's version); an unanswered one is a
    // miss, returned as nullopt until `liveness` misses in a row make the
    // coordinator count as gone: then the session disconnects and the error
    // is returned. "not_joined" (the coordinator forgot the session) also
    // ends the session and is returned.
    Result<std::optional<net::HeartbeatReply>> beat(uint64_t heldVersion);
    // For loops that keep the session alive while something else works:
    // call often (every 100 ms or sooner). Heartbeats when one is due, and
    // re-joins on the backoff schedule when the session was lost. Returns a
    // heartbeat's reply when one came.
    std::optional<net::HeartbeatReply> keepAlive(uint64_t heldVersion);
    // Runs `work` on a thread of its own and keeps the session alive until
    // it returns (starting a training core takes seconds: libtorch, CUDA).
    Status whileAlive(const std::function<Status()>& work, uint64_t heldVersion);

    // Drops the connection (it is reopened by the next join).
    void disconnect(const std::string& why);
    // The coordinator no longer knows this session: join again before the next request.
    void forget() { m_joined = false; }
    // Says goodbye (a short wait, even when stopping) and ends the session.
    void leave();

    template <typename Reply, typename Request> Result<Reply> call(const Request& message, int timeoutMs)
    {
        if (!m_connection)
            return Error::make(net::errc::kTimeout, "not connected to " + m_options.endpoint);
        return m_connection->call<Reply>(message, timeoutMs);
    }
    // describe/fetch of this project's resources (nullptr when not connected).
    std::unique_ptr<ConnectionSource> resources();

    bool joined() const { return m_joined; }
    bool everJoined() const { return m_everJoined; }
    const net::JoinReply& joinReply() const { return m_join; }
    const std::string& project() const { return m_options.project; }
    const std::string& endpoint() const { return m_options.endpoint; }
    // The newest version the coordinator announced (join, heartbeat, task).
    uint64_t serverVersion() const { return m_serverVersion; }
    void noteServerVersion(uint64_t version) { m_serverVersion = version; }
    uint64_t intervalMs() const { return m_intervalMs; }
    // A small request gets `liveness` heartbeat intervals.
    int controlTimeoutMs() const;
    // A chunk of up to 4 MiB may take a while on a slow link; so may the
    // replies the coordinator makes durable first (submit, get_task).
    int transferTimeoutMs() const;
    // How long a submit's answer may take before the submit is sent again
    // (docs/protocol.md §4: at least 20 s): the coordinator answers once the
    // acceptance is durable and, where it scores submissions
    // (trust.evaluate), once the score is in, which on a CPU host of a
    // GPT-2 124M project takes tens of seconds. The transfer timeout, and
    // never under kSubmitAnswerMs whatever the heartbeat interval.
    static constexpr int kSubmitAnswerMs = 30'000;
    int submitTimeoutMs() const;
    // The project's events, when subscribed (heartbeats carry the same news, later).
    EventListener* events() { return m_events ? &*m_events : nullptr; }
    const Traffic& traffic() const { return m_traffic; }
    const net::CurveKeyPair& keys() const { return m_keys; }
    ReconnectBackoff& backoff() { return m_backoff; }
    uint64_t reconnects() const { return m_reconnects; }

private:
    void listenForEvents();

    zmq::context_t& m_context;
    net::CurveKeyPair m_keys;
    SessionOptions m_options;
    const std::atomic<bool>& m_stop;
    Reporter& m_reporter;
    JoinCheck m_check;

    Traffic m_traffic;
    std::unique_ptr<Connection> m_connection;
    std::optional<EventListener> m_events;
    net::JoinReply m_join;
    bool m_joined = false;
    bool m_everJoined = false;
    uint64_t m_serverVersion = 0;
    uint64_t m_intervalMs = net::kHeartbeatIntervalMs;
    uint64_t m_liveness = net::kHeartbeatLiveness;
    Liveness m_missed;
    Clock::time_point m_nextBeat{};
    ReconnectBackoff m_backoff;
    Clock::time_point m_nextAttempt{};
    uint64_t m_reconnects = 0;
};

} // namespace crowdtrain::volunteer
