#include "net/transport/client.h"

#include "net/wire/error_codes.h"

#include <chrono>

namespace crowdtrain::net {

Result<std::unique_ptr<Client>> Client::connect(zmq::context_t& context, ClientOptions options)
{
    auto socket = makeCurveClientSocket(context, zmq::socket_type::dealer, options.serverPublicKey, options.keys,
        options.endpoint, options.maxReplyBytes);
    if (!socket)
        return socket.error();
    return std::unique_ptr<Client>(new Client(context, std::move(options), std::move(*socket)));
}

Client::Client(zmq::context_t& context, ClientOptions options, zmq::socket_t socket)
    : m_context(&context)
    , m_options(std::move(options))
    , m_socket(std::move(socket))
{ }

Status Client::reopen()
{
    m_socket.close();
    auto socket = makeCurveClientSocket(*m_context, zmq::socket_type::dealer, m_options.serverPublicKey, m_options.keys,
        m_options.endpoint, m_options.maxReplyBytes);
    if (!socket)
        return socket.error();
    m_socket = std::move(*socket);
    return Status::success();
}

Result<Envelope> Client::call(std::string_view request, uint64_t id, int timeoutMs, const std::atomic<bool>* cancel)
{
    using Clock = std::chrono::steady_clock;
    try {
        if (!m_socket.handle())
            if (Status reopened = reopen(); !reopened)
                return reopened.error();
        if (!m_socket.send(zmq::buffer(request), zmq::send_flags::dontwait))
            return Error::make(errc::kSendFailed, "the request could not be queued");
        const auto deadline = Clock::now() + std::chrono::milliseconds(timeoutMs);
        while (true) {
            if (cancel && cancel->load()) {
                if (Status reopened = reopen(); !reopened)
                    return reopened.error();
                return Error::make(errc::kCancelled, "stopped while waiting for " + m_options.endpoint);
            }
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
            if (left.count() <= 0)
                break;
            zmq::pollitem_t item{m_socket.handle(), 0, ZMQ_POLLIN, 0};
            const auto slice = cancel ? std::min(left, std::chrono::milliseconds(50)) : left;
            if (zmq::poll(&item, 1, slice) == 0)
                continue;
            zmq::message_t reply;
            if (!m_socket.recv(reply, zmq::recv_flags::dontwait))
                continue;
            if (reply.more()) {
                // Replies are one frame; drain and ignore anything else.
                while (reply.more() && m_socket.recv(reply, zmq::recv_flags::dontwait)) { }
                continue;
            }
            auto envelope = decodeEnvelope(reply.to_string_view(), EnvelopeKind::Reply);
            if (envelope && envelope->id != id)
                continue; // the reply to an earlier request that timed out
            return envelope;
        }
    } catch (const zmq::error_t& e) {
        return Error::make(errc::kZmqError, std::string("request to ") + m_options.endpoint + " failed: " + e.what());
    }
    if (Status reopened = reopen(); !reopened)
        return reopened.error();
    return Error::make(
        errc::kTimeout, "no reply from " + m_options.endpoint + " within " + std::to_string(timeoutMs) + " ms");
}

std::optional<std::string> endpointHost(std::string_view endpoint)
{
    constexpr std::string_view kTcp = "tcp://";
    const std::size_t colon = endpoint.rfind(':');
    if (!endpoint.starts_with(kTcp) || colon == std::string_view::npos || colon < kTcp.size())
        return std::nullopt;
    std::string_view host = endpoint.substr(kTcp.size(), colon - kTcp.size());
    if (host.starts_with('[') && host.ends_with(']'))
        host = host.substr(1, host.size() - 2);
    return std::string(host);
}

} // namespace crowdtrain::net
