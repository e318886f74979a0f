#pragma once

// The app's and CLI's end of the control API (docs/protocol.md section
// 12): requests to the daemon over one DEALER socket, the zguide's Lazy
// Pirate with request ids. Two ways to use it:
// - call() (the CLI): one request, waiting for its reply; a reply whose id
//   is not the one awaited (a late answer to one that timed out) is
//   skipped, or kept for takeReplies() when it answers a send().
// - send() + takeReplies() (the app): several requests in flight, replies
//   matched by id; fd() tells a QSocketNotifier when to look. The caller
//   times requests out and calls abandon().
// After a timeout the socket is closed and reopened (once nothing else is
// in flight) so that nothing queued in it reaches a daemon started later.
// Not thread-safe: owned and used by one thread (the GUI thread or the CLI).
// Events come through EventSubscriber (event_subscriber.h).

#include "core/result.h"
#include "net/control/control_envelope.h"
#include "net/control/control_protocol.h"
#include "net/control/event_subscriber.h"
#include "net/control/value.h"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace zmq {
class context_t;
class socket_t;
} // namespace zmq

namespace crowdtrain::control {

class ControlClient {
public:
    // checkPrivateDir(dir) ("no_daemon", "insecure_control_dir"), then
    // connects a DEALER to controlEndpoint(dir). Does not wait for the daemon.
    static Result<std::unique_ptr<ControlClient>> connect(const std::filesystem::path& dir);
    ~ControlClient();
    ControlClient(const ControlClient&) = delete;
    ControlClient& operator=(const ControlClient&) = delete;

    // Sends {type, body} and waits up to timeoutMs for its reply; returns
    // the reply's body, or the Error of an ok:false reply. Errors of its
    // own: "no_daemon" (no answer in time; the socket was reopened, so the
    // next call works once a daemon is back), "too_large" or "malformed"
    // (the request breaks the limits; nothing was sent), "malformed" (a
    // reply that does not decode), "zmq_error".
    Result<Value> call(std::string_view type, const Value& body = Value::map(), int timeoutMs = kDefaultCallTimeoutMs);

    // Sends {type, body} without waiting; returns its id. The errors of
    // call() that need no answer ("too_large", "malformed", "no_daemon"
    // when the request could not be queued, "zmq_error").
    Result<uint64_t> send(std::string_view type, const Value& body = Value::map());
    // The replies that have arrived to requests still in flight, without
    // waiting; each leaves the set in flight. A reply to an abandoned
    // request, or one that does not decode, is dropped.
    std::vector<Reply> takeReplies();
    // Gives up on a request (its timeout passed): its late reply will be
    // dropped, and once no request is in flight the socket is reopened.
    void abandon(uint64_t id);
    std::size_t inFlight() const { return m_inFlight.size(); }
    // ZMQ_FD of the request socket, for a QSocketNotifier (read). Edge-
    // triggered, and a send() may consume its signal: call takeReplies()
    // after each notification and after each send(). Changes when the
    // socket is reopened (fdGeneration() counts reopenings).
    int fd() const;
    uint64_t fdGeneration() const { return m_generation; }

    const std::filesystem::path& dir() const { return m_dir; }

private:
    explicit ControlClient(std::filesystem::path dir);
    void open();
    Result<std::string> encode(std::string_view type, const Value& body, uint64_t id) const;
    Result<Value> waitForReply(std::string_view type, uint64_t id, int timeoutMs);
    // One decoded reply frame without waiting; nullopt when none is queued;
    // an error with an empty code for a message of several frames (skipped).
    std::optional<Result<Reply>> receiveOne();
    void reopenIfIdle();

    std::filesystem::path m_dir;
    std::unique_ptr<zmq::context_t> m_context;
    std::unique_ptr<zmq::socket_t> m_socket;
    uint64_t m_lastId = 0;
    uint64_t m_generation = 0;
    std::unordered_set<uint64_t> m_inFlight; // sent by send(), not yet answered
    std::vector<Reply> m_early; // replies to send()s read while call() waited
    bool m_reopenWhenIdle = false;
};

} // namespace crowdtrain::control
