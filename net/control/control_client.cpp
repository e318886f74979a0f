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

int ControlClient::fd() const
{
    return static_cast<int>(m_socket->get(zmq::sockopt::fd));
}

void ControlClient::open()
{
    m_socket.reset();
    m_socket = std::make_unique<zmq::socket_t>(*m_context, zmq::socket_type::dealer);
    m_socket->set(zmq::sockopt::linger, 0);
    m_socket->set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(kMaxReplyBytes));
    m_socket->connect(controlEndpoint(m_dir));
    ++m_generation;
    // Whatever was in flight went with the old socket.
    m_inFlight.clear();
    m_reopenWhenIdle = false;
}

Result<std::string> ControlClient::encode(std::string_view type, const Value& body, uint64_t id) const
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
    std::string request = encodeRequest(type, id, body.isNil() ? Value::map() : body);
    if (request.size() > kMaxRequestBytes)
        return Error::make(errc::kTooLarge,
            "request \"" + std::string(type) + "\" of " + std::to_string(request.size())
                + " bytes exceeds the limit of " + std::to_string(kMaxRequestBytes));
    return request;
}

Result<Value> ControlClient::call(std::string_view type, const Value& body, int timeoutMs)
{
    const uint64_t id = ++m_lastId;
    auto request = encode(type, body, id);
    if (!request)
        return request.error();
    try {
        if (!m_socket->send(zmq::buffer(*request), zmq::send_flags::dontwait)) {
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

Result<uint64_t> ControlClient::send(std::string_view type, const Value& body)
{
    const uint64_t id = ++m_lastId;
    auto request = encode(type, body, id);
    if (!request)
        return request.error();
    try {
        if (!m_socket->send(zmq::buffer(*request), zmq::send_flags::dontwait)) {
            if (m_inFlight.empty())
                open();
            return Error::make(
                errc::kNoDaemon, "the request to the Crowdtrain daemon at " + m_dir.string() + " could not be queued");
        }
    } catch (const zmq::error_t& e) {
        return Error::make(
            errc::kZmqError, "request to the Crowdtrain daemon at " + m_dir.string() + " failed: " + e.what());
    }
    m_inFlight.insert(id);
    return id;
}

std::optional<Result<Reply>> ControlClient::receiveOne()
{
    zmq::message_t frame;
    if (!m_socket->recv(frame, zmq::recv_flags::dontwait))
        return std::nullopt;
    if (frame.more()) {
        // Replies are one frame: drop the whole message.
        while (frame.more() && m_socket->recv(frame, zmq::recv_flags::dontwait)) { }
        return Result<Reply>(Error::make("", "a reply of more than one frame")); // skipped, as replies are one frame
    }
    auto reply = decodeReply(frame.to_string_view());
    if (!reply)
        return Result<Reply>(Error::make(errc::kMalformed,
            "the reply of the Crowdtrain daemon at " + m_dir.string() + " does not decode: " + reply.error().message));
    return reply;
}

std::vector<Reply> ControlClient::takeReplies()
{
    std::vector<Reply> replies = std::move(m_early);
    m_early.clear();
    try {
        while (auto reply = receiveOne()) {
            if (!*reply || !m_inFlight.erase((*reply)->id))
                continue; // undecodable, or the late answer to an abandoned request
            replies.push_back(std::move(**reply));
        }
    } catch (const zmq::error_t&) {
        // A broken socket: the requests in flight time out and reopen it.
    }
    reopenIfIdle();
    return replies;
}

void ControlClient::abandon(uint64_t id)
{
    if (m_inFlight.erase(id))
        m_reopenWhenIdle = true;
    reopenIfIdle();
}

void ControlClient::reopenIfIdle()
{
    if (!m_reopenWhenIdle || !m_inFlight.empty())
        return;
    try {
        open();
    } catch (const zmq::error_t&) {
        // Left as it is; the next timeout tries again.
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
        auto reply = receiveOne();
        if (!reply)
            continue;
        if (!*reply) {
            if ((*reply).error().code.empty())
                continue;
            return (*reply).error();
        }
        if ((*reply)->id != id) {
            // An answer to a send() is kept for takeReplies(); anything else
            // is the late reply to a request that timed out.
            if (m_inFlight.erase((*reply)->id))
                m_early.push_back(std::move(**reply));
            continue;
        }
        if ((*reply)->type != type)
            return Error::make(errc::kMalformed,
                "the daemon answered a \"" + std::string(type) + "\" request as \"" + (*reply)->type + "\"");
        if (!(*reply)->ok)
            return (*reply)->error;
        return std::move((*reply)->body);
    }
    // Lazy Pirate: a new socket, so that the unanswered request is not
    // delivered to a daemon that starts later, nor its answer read as the
    // next call's.
    open();
    return Error::make(errc::kNoDaemon,
        "no answer from the Crowdtrain daemon at " + m_dir.string() + " within " + std::to_string(timeoutMs) + " ms");
}

} // namespace crowdtrain::control
