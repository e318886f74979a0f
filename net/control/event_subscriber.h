#pragma once

// Events from the daemon (docs/protocol.md section 12): a SUB socket on
// eventsEndpoint(dir). ZeroMQ reconnects by itself after the daemon
// restarts; events published while no subscriber was connected are lost,
// as are the first ones after connecting (a PUB/SUB "slow joiner"), so a
// client asks the daemon for the current state after subscribing and
// then applies events. `seq` rises by 1 per event of one daemon run: a
// jump means missed events, a drop means a new daemon.
// Not thread-safe: owned and used by one thread.

#include "core/result.h"
#include "net/control/control_envelope.h"

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace zmq {
class context_t;
class socket_t;
} // namespace zmq

namespace crowdtrain::control {

class EventSubscriber {
public:
    using Event = control::Event;

    // checkPrivateDir(dir), then subscribes to `topics` (event types,
    // matched exactly; empty: every event).
    static Result<std::unique_ptr<EventSubscriber>> connect(
        const std::filesystem::path& dir, std::vector<std::string> topics = {});
    ~EventSubscriber();
    EventSubscriber(const EventSubscriber&) = delete;
    EventSubscriber& operator=(const EventSubscriber&) = delete;

    // The next event, waiting up to timeoutMs (0: only what has arrived;
    // negative: without a limit); nullopt on timeout. Frames that do not
    // decode, and events of other topics, are skipped.
    std::optional<Event> next(int timeoutMs);

    // ZMQ_FD, for a QSocketNotifier (read). It is edge-triggered: it
    // signals that the socket's state changed, not that an event waits,
    // and it does not signal again for events already queued. So after
    // each notification call next(0) until it returns nullopt.
    int fd() const;

private:
    EventSubscriber(std::unique_ptr<zmq::context_t> context, std::unique_ptr<zmq::socket_t> socket,
        std::vector<std::string> topics);
    std::optional<Event> receiveOne();

    std::unique_ptr<zmq::context_t> m_context;
    std::unique_ptr<zmq::socket_t> m_socket;
    std::vector<std::string> m_topics;
};

} // namespace crowdtrain::control
