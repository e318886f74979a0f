#include "net/volunteer/connection.h"

#include "net/wire/error_codes.h"

namespace crowdtrain::volunteer {
namespace {

// msgpack::packer's stream: counts instead of storing.
struct ByteCounter {
    uint64_t bytes = 0;
    void write(const char*, std::size_t n) { bytes += n; }
};

} // namespace

bool isConnectionError(const Error& error)
{
    return net::isConnectionError(error.code);
}

Result<std::unique_ptr<Connection>> Connection::open(
    zmq::context_t& context, net::ClientOptions options, Traffic& traffic, const std::atomic<bool>* stop)
{
    auto client = net::Client::connect(context, std::move(options));
    if (!client)
        return client.error();
    return std::unique_ptr<Connection>(new Connection(std::move(*client), traffic, stop));
}

Connection::Connection(std::unique_ptr<net::Client> client, Traffic& traffic, const std::atomic<bool>* stop)
    : m_client(std::move(client))
    , m_traffic(traffic)
    , m_stop(stop)
{ }

Result<net::Envelope> Connection::send(
    const std::string& frame, uint64_t id, int timeoutMs, const std::atomic<bool>* cancel)
{
    using Direction = limits::NetworkThrottle::Direction;
    if (m_traffic.throttle && !m_traffic.throttle->pass(Direction::Up, frame.size(), cancel))
        return Error::make(net::errc::kCancelled, "stopped while holding to the upload limit");
    m_traffic.bytesSent += frame.size();
    ++m_traffic.requests;
    auto envelope = m_client->call(frame, id, timeoutMs, cancel);
    if (envelope) {
        // Client keeps the reply frame to itself; msgpack-c writes the
        // shortest encoding, so packing the decoded tree again gives the size
        // of the frame the server (also msgpack-c) sent.
        ByteCounter counter;
        msgpack::pack(counter, envelope->handle.get());
        m_traffic.bytesReceived += counter.bytes;
        // The reply is here; the wait holds the next request back, so a
        // transfer (a sequence of chunk requests) keeps to the limit.
        if (m_traffic.throttle)
            m_traffic.throttle->pass(Direction::Down, counter.bytes, cancel);
    }
    return envelope;
}

ConnectionSource::ConnectionSource(Connection& connection, std::string project, int timeoutMs)
    : m_connection(connection)
    , m_project(std::move(project))
    , m_timeoutMs(timeoutMs)
{ }

Result<net::ResourceDescription> ConnectionSource::describe(const std::string& resource)
{
    auto reply = m_connection.call<net::ResourceDescription>(net::DescribeRequest{m_project, resource}, m_timeoutMs);
    if (reply && reply->resource != resource)
        return Error::make(net::errc::kMalformed, "asked to describe " + resource + ", got " + reply->resource);
    return reply;
}

Result<std::string> ConnectionSource::fetch(const std::string& resource, uint64_t index)
{
    auto reply = m_connection.call<net::FetchReply>(net::FetchRequest{m_project, resource, index}, m_timeoutMs);
    if (!reply)
        return reply.error();
    if (reply->resource != resource || reply->index != index)
        return Error::make(net::errc::kChecksumMismatch,
            "asked for chunk " + std::to_string(index) + " of " + resource + ", got chunk "
                + std::to_string(reply->index) + " of " + reply->resource);
    return std::move(reply->data);
}

} // namespace crowdtrain::volunteer
