#pragma once

// The app's and CLI's end of the control API (docs/protocol.md section
// 12): requests to the daemon over one DEALER socket, the zguide's Lazy
// Pirate with request ids. One request is in flight at a time; a reply
// whose id is not the current request's (a late answer to one that timed
// out) is skipped, and after a timeout the socket is closed and reopened so
// that nothing queued in it reaches a daemon started later.
// Not thread-safe: owned and used by one thread (the GUI thread or the CLI).
// Events come through EventSubscriber (event_subscriber.h).

#include "engine/result.h"
#include "net/control/control_protocol.h"
#include "net/control/event_subscriber.h"
#include "net/control/value.h"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string_view>

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

    const std::filesystem::path& dir() const { return m_dir; }

private:
    explicit ControlClient(std::filesystem::path dir);
    void open();
    Result<Value> waitForReply(std::string_view type, uint64_t id, int timeoutMs);

    std::filesystem::path m_dir;
    std::unique_ptr<zmq::context_t> m_context;
    std::unique_ptr<zmq::socket_t> m_socket;
    uint64_t m_lastId = 0;
};

} // namespace crowdtrain::control
