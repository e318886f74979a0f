#include "net/transport/curve_socket.h"

#include "net/transport/pirate.h"
#include "net/wire/error_codes.h"

#include <zmq_addon.hpp>

namespace crowdtrain::net {

namespace {

void commonOptions(zmq::socket_t& socket, int64_t maxMessageBytes)
{
    socket.set(zmq::sockopt::linger, 0);
    socket.set(zmq::sockopt::maxmsgsize, maxMessageBytes);
    socket.set(zmq::sockopt::handshake_ivl, kHandshakeTimeoutMs);
}

Error zmqError(const std::string& what, const zmq::error_t& e)
{
    return Error::make(errc::kZmqError, what + ": " + e.what());
}

} // namespace

Result<zmq::socket_t> makeCurveServerSocket(zmq::context_t& context, zmq::socket_type type,
    const CurveKeyPair& serverKeys, const std::string& bindEndpoint, int64_t maxMessageBytes)
{
    if (type != zmq::socket_type::router && type != zmq::socket_type::pub)
        return Error::make(errc::kInvalidArgument, "a Curve server socket is a ROUTER or a PUB");
    try {
        zmq::socket_t socket(context, type);
        commonOptions(socket, maxMessageBytes);
        socket.set(zmq::sockopt::zap_domain, kZapDomain);
        socket.set(zmq::sockopt::curve_server, true);
        socket.set(zmq::sockopt::curve_secretkey, serverKeys.secretKey);
        if (type == zmq::socket_type::router) {
            // What one peer can make the server hold: a reply to a full
            // queue is dropped (a peer that never reads loses its replies,
            // not the server its memory), and a peer whose requests queue
            // up is read no faster than the server answers. Mandatory
            // routing, so that sendReply reports a dropped reply (a full
            // queue, a peer gone) instead of counting it as sent.
            socket.set(zmq::sockopt::router_mandatory, true);
            socket.set(zmq::sockopt::sndhwm, int(kMaxQueuedRepliesPerPeer));
            socket.set(zmq::sockopt::rcvhwm, int(kMaxQueuedRequestsPerPeer));
        }
        socket.bind(bindEndpoint);
        return socket;
    } catch (const zmq::error_t& e) {
        return zmqError("cannot bind " + bindEndpoint, e);
    }
}

Result<zmq::socket_t> makeCurveClientSocket(zmq::context_t& context, zmq::socket_type type,
    const std::string& serverPublicKey, const CurveKeyPair& clientKeys, const std::string& connectEndpoint,
    int64_t maxMessageBytes)
{
    if (type != zmq::socket_type::dealer && type != zmq::socket_type::sub)
        return Error::make(errc::kInvalidArgument, "a Curve client socket is a DEALER or a SUB");
    try {
        zmq::socket_t socket(context, type);
        commonOptions(socket, maxMessageBytes);
        socket.set(zmq::sockopt::curve_serverkey, serverPublicKey);
        socket.set(zmq::sockopt::curve_publickey, clientKeys.publicKey);
        socket.set(zmq::sockopt::curve_secretkey, clientKeys.secretKey);
        socket.connect(connectEndpoint);
        return socket;
    } catch (const zmq::error_t& e) {
        return zmqError("cannot connect to " + connectEndpoint, e);
    }
}

std::optional<std::string> peerPublicKey(const zmq::message_t& message)
{
    // zmq_msg_gets takes a non-const message but does not change it.
    const char* value = zmq_msg_gets(const_cast<zmq_msg_t*>(message.handle()), "User-Id");
    if (!value || !*value)
        return std::nullopt;
    return std::string(value);
}

std::string lastEndpoint(const zmq::socket_t& socket)
{
    return socket.get(zmq::sockopt::last_endpoint);
}

std::optional<RoutedRequest> receiveRequest(zmq::socket_t& router)
{
    std::vector<zmq::message_t> frames;
    try {
        if (!zmq::recv_multipart(router, std::back_inserter(frames), zmq::recv_flags::dontwait))
            return std::nullopt;
    } catch (const zmq::error_t&) {
        return std::nullopt;
    }
    // A ROUTER adds one identity frame; a REQ client adds an empty delimiter.
    if (frames.size() < 2 || frames.size() > kMaxRouteFrames + 1)
        return std::nullopt;
    auto key = peerPublicKey(frames.back());
    if (!key)
        return std::nullopt;
    RoutedRequest request;
    request.payload = frames.back().to_string();
    request.peerKey = std::move(*key);
    // zmq_msg_gets takes a non-const message but does not change it.
    if (const char* address = zmq_msg_gets(const_cast<zmq_msg_t*>(frames.back().handle()), "Peer-Address"))
        request.peerAddress = address;
    frames.pop_back();
    request.route = std::move(frames);
    return request;
}

Status sendReply(zmq::socket_t& router, std::vector<zmq::message_t>& route, std::string_view payload)
{
    try {
        for (zmq::message_t& frame : route)
            if (!router.send(
                    zmq::buffer(frame.data(), frame.size()), zmq::send_flags::sndmore | zmq::send_flags::dontwait))
                return Error::make(errc::kSendFailed, "the reply could not be queued");
        if (!router.send(zmq::buffer(payload), zmq::send_flags::dontwait))
            return Error::make(errc::kSendFailed, "the reply could not be queued");
    } catch (const zmq::error_t& e) {
        return Error::make(errc::kSendFailed, std::string("cannot send the reply: ") + e.what());
    }
    return Status::success();
}

} // namespace crowdtrain::net
