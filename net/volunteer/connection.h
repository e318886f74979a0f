#pragma once

// The volunteer's side of one connection to a coordinator: a net::Client
// (Curve DEALER, Lazy Pirate) that counts the bytes of every request it
// sends and every reply it receives, and a ResourceSource over it for
// Downloads. Byte counters live outside (Traffic), so they survive
// reconnects. A call waits at most its timeout and returns "cancelled" as
// soon as the stop flag given at open() is set (checked every 50 ms), so a
// stopping agent never waits out a request. Used by the one thread that owns
// the socket.

#include "net/limits/throttle.h"
#include "net/transfer/download.h"
#include "net/transport/client.h"

#include <atomic>
#include <memory>

namespace crowdtrain::volunteer {

// Message bytes over the socket (the msgpack frames; CurveZMQ adds ~40 bytes a frame).
struct Traffic {
    uint64_t bytesSent = 0;
    uint64_t bytesReceived = 0;
    uint64_t requests = 0;
    uint64_t heartbeats = 0; // of the requests
    // The volunteer's bandwidth limits and the month's count; may be null.
    std::shared_ptr<limits::NetworkThrottle> throttle;
};

// True for the errors that mean "no answer" rather than "the server said no".
bool isConnectionError(const Error& error);

class Connection {
public:
    static Result<std::unique_ptr<Connection>> open(
        zmq::context_t& context, net::ClientOptions options, Traffic& traffic, const std::atomic<bool>* stop);

    // `cancellable` false: the call waits out its timeout even when stopping
    // (the goodbye `leave`).
    template <typename Reply, typename Request>
    Result<Reply> call(const Request& message, int timeoutMs, bool cancellable = true)
    {
        net::Client& client = *m_client;
        const uint64_t id = client.nextRequestId();
        const std::string frame = net::encodeRequest(message, id);
        auto envelope = send(frame, id, timeoutMs, cancellable ? m_stop : nullptr);
        if (!envelope)
            return envelope.error();
        return net::decodeReplyBody<Reply>(*envelope);
    }

private:
    Connection(std::unique_ptr<net::Client> client, Traffic& traffic, const std::atomic<bool>* stop);
    Result<net::Envelope> send(const std::string& frame, uint64_t id, int timeoutMs, const std::atomic<bool>* cancel);

    std::unique_ptr<net::Client> m_client;
    Traffic& m_traffic;
    const std::atomic<bool>* m_stop;
};

// describe/fetch of one project's resources over a Connection.
class ConnectionSource : public net::ResourceSource {
public:
    ConnectionSource(Connection& connection, std::string project, int timeoutMs);
    Result<net::ResourceDescription> describe(const std::string& resource) override;
    Result<std::string> fetch(const std::string& resource, uint64_t index) override;

private:
    Connection& m_connection;
    std::string m_project;
    int m_timeoutMs;
};

} // namespace crowdtrain::volunteer
