#include "net/control/event_subscriber.h"

#include "net/control/control_paths.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <zmq.hpp>

namespace crowdtrain::control {

Result<std::unique_ptr<EventSubscriber>> EventSubscriber::connect(
    const std::filesystem::path& dir, std::vector<std::string> topics)
{
    if (Status checked = checkPrivateDir(dir); !checked)
        return checked.error();
    try {
        auto context = std::make_unique<zmq::context_t>(1);
        auto socket = std::make_unique<zmq::socket_t>(*context, zmq::socket_type::sub);
        socket->set(zmq::sockopt::linger, 0);
        socket->set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(kMaxEventBytes));
        // ZeroMQ matches prefixes ("job" would also let "jobs" through);
        // next() keeps only exact matches.
        if (topics.empty())
            socket->set(zmq::sockopt::subscribe, "");
        for (const std::string& topic : topics)
            socket->set(zmq::sockopt::subscribe, topic);
        socket->connect(eventsEndpoint(dir));
        return std::unique_ptr<EventSubscriber>(
            new EventSubscriber(std::move(context), std::move(socket), std::move(topics)));
    } catch (const zmq::error_t& e) {
        return Error::make(errc::kZmqError, "cannot subscribe to " + eventsEndpoint(dir) + ": " + e.what());
    }
}

EventSubscriber::EventSubscriber(
    std::unique_ptr<zmq::context_t> context, std::unique_ptr<zmq::socket_t> socket, std::vector<std::string> topics)
    : m_context(std::move(context))
    , m_socket(std::move(socket))
    , m_topics(std::move(topics))
{ }

EventSubscriber::~EventSubscriber()
{
    m_socket.reset();
    m_context.reset();
}

std::optional<Event> EventSubscriber::next(int timeoutMs)
{
    using Clock = std::chrono::steady_clock;
    const auto deadline = Clock::now() + std::chrono::milliseconds(std::max(timeoutMs, 0));
    while (true) {
        auto left = std::chrono::milliseconds(-1);
        if (timeoutMs >= 0)
            left = std::max(std::chrono::milliseconds(0),
                std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
        zmq::pollitem_t item{m_socket->handle(), 0, ZMQ_POLLIN, 0};
        try {
            if (zmq::poll(&item, 1, left) == 0)
                return std::nullopt;
            if (auto event = receiveOne())
                return event;
        } catch (const zmq::error_t& e) {
            if (e.num() != EINTR)
                return std::nullopt;
        }
    }
}

std::optional<Event> EventSubscriber::receiveOne()
{
    zmq::message_t topic;
    if (!m_socket->recv(topic, zmq::recv_flags::dontwait))
        return std::nullopt;
    // An event is exactly two frames; anything else is read to its end and dropped.
    std::size_t frames = 1;
    zmq::message_t payload;
    for (bool more = topic.more(); more; ++frames) {
        zmq::message_t frame;
        if (!m_socket->recv(frame, zmq::recv_flags::dontwait))
            break;
        more = frame.more();
        if (frames == 1)
            payload = std::move(frame);
    }
    if (frames != 2)
        return std::nullopt;
    const std::string_view type = topic.to_string_view();
    if (!m_topics.empty() && std::find(m_topics.begin(), m_topics.end(), type) == m_topics.end())
        return std::nullopt;
    auto event = decodeEvent(type, payload.to_string_view());
    if (!event)
        return std::nullopt;
    return std::move(*event);
}

int EventSubscriber::fd() const
{
    return static_cast<int>(m_socket->get(zmq::sockopt::fd));
}

} // namespace crowdtrain::control
