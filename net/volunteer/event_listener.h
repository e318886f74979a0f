#pragma once

// The volunteer's subscription to a coordinator's events (docs/protocol.md,
// section 5): a Curve SUB socket on the host of the request endpoint and the
// port the join reply named, subscribed to the two events that change what
// a volunteer does next: round_wrap_up (stop the task at the next step and
// submit) and version_published (a new theta_v is served: stop waiting).
// PUB is lossy; heartbeats stay the reliable path and these only make the
// volunteer react sooner. Used by the one thread that owns the agent.

#include "core/result.h"
#include "net/transport/curve_keys.h"

#include <zmq.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace crowdtrain::volunteer {

struct ProjectEvents {
    std::optional<uint64_t> wrapUpVersion; // round_wrap_up for tasks from this version
    std::optional<uint64_t> publishedVersion; // the newest version_published seen
};

class EventListener {
public:
    // The events endpoint: tcp://<host of requestEndpoint>:<port>; nothing
    // for a port of 0 or an endpoint that is not tcp://host:port.
    static std::optional<std::string> endpointFor(const std::string& requestEndpoint, uint64_t port);

    static Result<EventListener> open(zmq::context_t& context, const std::string& endpoint,
        const std::string& serverPublicKey, const net::CurveKeyPair& keys, const std::string& project);

    // Waits up to timeoutMs for events of the project and returns what came
    // (empty on a timeout); malformed events are skipped.
    ProjectEvents wait(int timeoutMs);

    const std::string& endpoint() const { return m_endpoint; }

private:
    EventListener(zmq::socket_t socket, std::string endpoint, std::string project);

    zmq::socket_t m_socket;
    std::string m_endpoint;
    std::string m_project;
};

} // namespace crowdtrain::volunteer
