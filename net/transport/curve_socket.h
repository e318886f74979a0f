#pragma once

// CurveZMQ sockets with the project's settings: linger 0, ZMQ_MAXMSGSIZE as a
// hard cap (a bigger frame drops the connection before it is read), a
// handshake timeout, and the ZAP domain "crowdtrain" on servers. Servers are
// ROUTER (requests) or PUB (events); clients DEALER or SUB. A socket is used
// by one thread at a time (ZeroMQ's rule). Errors are values.

#include "core/result.h"
#include "net/transport/curve_keys.h"
#include "net/wire/limits.h"

#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

namespace crowdtrain::net {

inline constexpr const char* kZapDomain = "crowdtrain";

// Binds a ROUTER or PUB socket with the server's key pair. Start the
// context's ZapAuthenticator first, or clients are not identified.
Result<zmq::socket_t> makeCurveServerSocket(zmq::context_t& context, zmq::socket_type type,
    const CurveKeyPair& serverKeys, const std::string& bindEndpoint, int64_t maxMessageBytes = kMaxRequestBytes);

// Connects a DEALER or SUB socket that trusts only `serverPublicKey`.
Result<zmq::socket_t> makeCurveClientSocket(zmq::context_t& context, zmq::socket_type type,
    const std::string& serverPublicKey, const CurveKeyPair& clientKeys, const std::string& connectEndpoint,
    int64_t maxMessageBytes = kMaxReplyBytes);

// The Z85 public key the ZAP handler authenticated for the connection a
// message came from; nullopt when there is none (no ZAP handler, NULL peer).
std::optional<std::string> peerPublicKey(const zmq::message_t& message);

// The endpoint a socket bound to, e.g. "tcp://127.0.0.1:41234" after binding
// "tcp://127.0.0.1:*".
std::string lastEndpoint(const zmq::socket_t& socket);

// One request as a ROUTER received it: the routing frames to send back, the
// payload (last frame) and the authenticated sender.
struct RoutedRequest {
    std::vector<zmq::message_t> route; // identity frame(s), plus an empty delimiter from REQ clients
    std::string payload;
    std::string peerKey; // Z85; never empty (unauthenticated messages are dropped)
    std::string peerAddress; // the TCP peer's IP address ("" when the transport has none)
};

inline constexpr std::size_t kMaxRouteFrames = 3;

// Receives one message without blocking. nullopt when none is waiting, or
// when the message was dropped (too many frames, no authenticated key).
std::optional<RoutedRequest> receiveRequest(zmq::socket_t& router);

// Sends `payload` back along `route`. Errors: "send_failed" (the peer is gone).
Status sendReply(zmq::socket_t& router, std::vector<zmq::message_t>& route, std::string_view payload);

} // namespace crowdtrain::net
