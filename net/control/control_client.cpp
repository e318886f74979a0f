#include "net/control/control_client.h"

#include "net/control/control_envelope.h"
#include "net/control/control_paths.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <zmq.hpp>

namespace crowdtrain::control {

Result<std::unique_ptr<ControlClient>> ControlClient::connect(const std::filesystem::path& dir)
{
    if (Status checked = checkPrivateDir(dir); !checked)
        return checked.error();
    std::unique_ptr<ControlClient> client(new ControlClient(dir));
    try {
        client->m_context = std::make_unique<zmq::context_t>(1);
        client->open();
    } catch (const zmq::error_t& e) {
        return Error::make(errc::kZmqError, "cannot connect to " + controlEndpoint(dir) + ": " + e.what());
    }
    return client;
}

ControlClient::ControlClient(std::filesystem::path dir)
    : m_dir(std::move(dir))
{ }

ControlClient::~ControlClient()
{
    m_socket.reset();
    m_context.reset();
}

void ControlClient::open()
{
    m_socket.reset();
    m_socket = std::make_unique<zmq::socket_t>(*m_context, zmq::socket_type::dealer);
    m_socket->set(zmq::sockopt::linger, 0);
    m_socket->set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(kMaxReplyBytes));
    m_socket->connect(controlEndpoint(m_dir));
}

Result<Value> ControlClient::call(std::string_view type, const Value& body, int timeoutMs)
{
    // A request the daemon would refuse fails here, with the same code,
    // rather than as a timeout.
    if (!isMessageType(type))
        return Error::make(errc::kMalformed,
            "request type \"" + std::string(type) + "\" is not 1 to " + std::to_string(kMaxTypeBytes)
                + " printable ASCII characters");
    if (!body.isMap() && !body.isNil())
        return Error::make(errc::kMalformed, "the body of a \"" + std::string(type) + "\" request is not a map");
    DecodeLimits bodyLimits = DecodeLimits::request();
    bodyLimits.maxDepth -= 1; // the envelope map is level 1
    if (Status fits = checkLimits(body, bodyLimits); !fits)
        return Error::make(fits.error().code, "request \"" + std::string(type) + "\": " + fits.error().message);
    const uint64_t id = ++m_lastId;
    const std::string request = encodeRequest(type, id, body.isNil() ? Value::map() : body);
    if (request.size() > kMaxRequestBytes)
        return Error::make(errc::kTooLarge,
            "request \"" + std::string(type) + "\" of " + std::to_string(request.size())
                + " bytes exceeds the limit of " + std::to_string(kMaxRequestBytes));
    try {
        if (!m_socket->send(zmq::buffer(request), zmq::send_flags::dontwait)) {
            open();
            return Error::make(
                errc::kNoDaemon, "the request to the Crowdtrain daemon at " + m_dir.string() + " could not be queued");
        }
        return waitForReply(type, id, std::max(timeoutMs, 0));
    } catch (const zmq::error_t& e) {
        try {
            open();
        } catch (const zmq::error_t&) {
            // Left closed; the next call fails the same way.
        }
        return Error::make(
            errc::kZmqError, "request to the Crowdtrain daemon at " + m_dir.string() + " failed: " + e.what());
    }
}

Result<Value> ControlClient::waitForReply(std::string_view type, uint64_t id, int timeoutMs)
{
    using Clock = std::chrono::steady_clock;
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeoutMs);
    while (true) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        if (left.count() < 0)
            break;
        zmq::pollitem_t item{m_socket->handle(), 0, ZMQ_POLLIN, 0};
        try {
            if (zmq::poll(&item, 1, left) == 0)
                break;
        } catch (const zmq::error_t& e) {
            if (e.num() == EINTR)
                continue;
            throw;
        }
        zmq::message_t frame;
        if (!m_socket->recv(frame, zmq::recv_flags::dontwait))
            continue;
        if (frame.more()) {
            // Replies are one frame: drop the whole message.
            while (frame.more() && m_socket->recv(frame, zmq::recv_flags::dontwait)) { }
            continue;
        }
        auto reply = decodeReply(frame.to_string_view());
        if (!reply)
            return Error::make(errc::kMalformed,
                "the reply of the Crowdtrain daemon at " + m_dir.string()
                    + " does not decode: " + reply.error().message);
        if (reply->id != id)
            continue; // the late reply to a request that timed out
        if (reply->type != type)
            return Error::make(errc::kMalformed,
                "the daemon answered a \"" + std::string(type) + "\" request as \"" + reply->type + "\"");
        if (!reply->ok)
            return reply->error;
        return std::move(reply->body);
    }
    // Lazy Pirate: a new socket, so that the unanswered request is not
    // delivered to a daemon that starts later, nor its answer read as the
    // next call's.
    open();
    return Error::make(errc::kNoDaemon,
        "no answer from the Crowdtrain daemon at " + m_dir.string() + " within " + std::to_string(timeoutMs) + " ms");
}

} // namespace crowdtrain::control
