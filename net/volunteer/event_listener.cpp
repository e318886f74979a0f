#include "net/volunteer/event_listener.h"

#include "net/transport/curve_socket.h"
#include "net/wire/error_codes.h"
#include "net/wire/events.h"
#include "net/wire/limits.h"

#include <algorithm>
#include <chrono>

namespace crowdtrain::volunteer {

std::optional<std::string> EventListener::endpointFor(const std::string& requestEndpoint, uint64_t port)
{
    const std::string scheme = "tcp://";
    const std::size_t colon = requestEndpoint.rfind(':');
    if (port == 0 || port > 65535 || !requestEndpoint.starts_with(scheme) || colon == std::string::npos
        || colon < scheme.size() + 1)
        return std::nullopt;
    return requestEndpoint.substr(0, colon + 1) + std::to_string(port);
}

EventListener::EventListener(zmq::socket_t socket, std::string endpoint, std::string project)
    : m_socket(std::move(socket))
    , m_endpoint(std::move(endpoint))
    , m_project(std::move(project))
{ }

Result<EventListener> EventListener::open(zmq::context_t& context, const std::string& endpoint,
    const std::string& serverPublicKey, const net::CurveKeyPair& keys, const std::string& project)
{
    auto socket = net::makeCurveClientSocket(
        context, zmq::socket_type::sub, serverPublicKey, keys, endpoint, int64_t(net::kMaxEventBytes) * 2);
    if (!socket)
        return socket.error();
    try {
        for (std::string_view type : {net::RoundWrapUpEvent::kType, net::VersionPublishedEvent::kType})
            socket->set(zmq::sockopt::subscribe, net::eventTopic(project, type));
    } catch (const zmq::error_t& e) {
        return Error::make(net::errc::kIoError, std::string("cannot subscribe to ") + endpoint + ": " + e.what());
    }
    return EventListener(std::move(*socket), endpoint, project);
}

ProjectEvents EventListener::wait(int timeoutMs)
{
    ProjectEvents seen;
    zmq::pollitem_t items[] = {{m_socket.handle(), 0, ZMQ_POLLIN, 0}};
    try {
        if (zmq::poll(items, 1, std::chrono::milliseconds(std::max(0, timeoutMs))) <= 0)
            return seen;
        while (true) {
            zmq::message_t topic, body;
            if (!m_socket.recv(topic, zmq::recv_flags::dontwait))
                break;
            if (!topic.more() || !m_socket.recv(body, zmq::recv_flags::dontwait))
                continue;
            while (body.more()) { // not an event of ours: drop the rest of it
                zmq::message_t rest;
                if (!m_socket.recv(rest, zmq::recv_flags::dontwait))
                    break;
                body = std::move(rest);
            }
            auto decoded = net::decodeEventFrames(topic.to_string_view(), body.to_string_view());
            if (!decoded || decoded->project != m_project)
                continue;
            if (decoded->envelope.type == net::RoundWrapUpEvent::kType) {
                if (auto event = net::decodeEvent<net::RoundWrapUpEvent>(*decoded))
                    seen.wrapUpVersion = event->version;
            } else if (decoded->envelope.type == net::VersionPublishedEvent::kType) {
                if (auto event = net::decodeEvent<net::VersionPublishedEvent>(*decoded))
                    seen.publishedVersion = std::max(seen.publishedVersion.value_or(0), event->version);
            }
        }
    } catch (const zmq::error_t&) {
        // A closed context or an interrupted poll: nothing seen.
    }
    return seen;
}

} // namespace crowdtrain::volunteer
