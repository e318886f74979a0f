#pragma once

// A request/reply client over one Curve DEALER socket (the zguide's Lazy
// Pirate with request ids): send one request frame, wait for the reply with
// the same id, discard replies to earlier requests. After a timeout the
// socket is closed and reopened, so that neither a late reply nor a request
// still queued in the old socket can be mistaken for the next one.
// Owned and used by one thread.

#include "net/transport/curve_socket.h"
#include "net/transport/pirate.h"
#include "net/wire/envelope.h"

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace crowdtrain::net {

struct ClientOptions {
    std::string endpoint; // "tcp://host:port"
    std::string serverPublicKey; // Z85
    CurveKeyPair keys; // this client's identity
    int64_t maxReplyBytes = kMaxReplyBytes;
};

class Client {
public:
    static Result<std::unique_ptr<Client>> connect(zmq::context_t& context, ClientOptions options);

    // Sends `request` (an encoded request whose id is `id`) and returns the
    // decoded reply envelope. Errors: "timeout" (no reply within timeoutMs;
    // the socket was reopened), "cancelled" (`cancel` was set while waiting,
    // checked every 50 ms; the socket was reopened), a decode error of the
    // reply, "zmq_error".
    Result<Envelope> call(std::string_view request, uint64_t id, int timeoutMs = kRequestTimeoutMs,
        const std::atomic<bool>* cancel = nullptr);

    // Encodes, sends, waits and decodes. A server error reply becomes the
    // Error it carries ("stale_version", "not_found", ...).
    template <typename Reply, typename Request>
    Result<Reply> request(const Request& message, int timeoutMs = kRequestTimeoutMs)
    {
        const uint64_t id = nextRequestId();
        auto envelope = call(encodeRequest(message, id), id, timeoutMs);
        if (!envelope)
            return envelope.error();
        return decodeReplyBody<Reply>(*envelope);
    }

    uint64_t nextRequestId() { return ++m_lastId; }
    const ClientOptions& options() const { return m_options; }

private:
    Client(zmq::context_t& context, ClientOptions options, zmq::socket_t socket);
    Status reopen();

    zmq::context_t* m_context;
    ClientOptions m_options;
    zmq::socket_t m_socket;
    uint64_t m_lastId = 0;
};

// The host of a ZeroMQ "tcp://HOST:PORT" endpoint, without IPv6 brackets
// ("*" stays "*"); nullopt for anything else.
std::optional<std::string> endpointHost(std::string_view endpoint);

} // namespace crowdtrain::net
