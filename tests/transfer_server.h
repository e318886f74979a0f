#pragma once

// A coordinator's transfer side in a test: serves a ResourceTable's
// describe and fetch requests over a Curve ROUTER on 127.0.0.1, on a thread
// of its own, and records which chunks it sent and when.

#include "net/transfer/resource_table.h"
#include "net/transport/curve_keys.h"
#include "net/transport/curve_socket.h"
#include "net/wire/envelope.h"
#include "net/wire/messages_resource.h"

#include <QtGlobal>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

namespace crowdtrain::testing {

using namespace crowdtrain::net;

// Serves a ResourceTable over a Curve ROUTER and counts fetches per chunk.
class TransferServer {
public:
    TransferServer(zmq::context_t& context, const CurveKeyPair& keys, const ResourceTable& table)
        : m_table(table)
    {
        auto socket = makeCurveServerSocket(context, zmq::socket_type::router, keys, "tcp://127.0.0.1:*");
        if (!socket)
            qFatal("%s", socket.error().message.c_str());
        m_socket = std::move(*socket);
        endpoint = lastEndpoint(m_socket);
        m_thread = std::thread([this] { run(); });
    }
    ~TransferServer()
    {
        m_stop = true;
        m_thread.join();
    }

    std::vector<uint64_t> fetched()
    {
        std::lock_guard lock(m_mutex);
        return m_fetched;
    }
    // Each chunk sent: when, and its bytes.
    struct Sent {
        std::chrono::steady_clock::time_point at;
        uint64_t bytes = 0;
    };
    std::vector<Sent> sent()
    {
        std::lock_guard lock(m_mutex);
        return m_sent;
    }

    std::string endpoint;

private:
    void run()
    {
        while (!m_stop) {
            zmq::pollitem_t item{m_socket.handle(), 0, ZMQ_POLLIN, 0};
            if (zmq::poll(&item, 1, std::chrono::milliseconds(20)) == 0)
                continue;
            auto request = receiveRequest(m_socket);
            if (!request)
                continue;
            auto envelope = decodeEnvelope(request->payload, EnvelopeKind::Request);
            if (!envelope) {
                (void)sendReply(m_socket, request->route,
                    encodeErrorReply(bestEffortRequestId(request->payload), envelope.error()));
                continue;
            }
            if (auto fetch = decodeBody<FetchRequest>(*envelope)) {
                std::lock_guard lock(m_mutex);
                m_fetched.push_back(fetch->index);
            }
            auto reply = handleTransferRequest(m_table, *envelope);
            if (auto fetch = decodeBody<FetchRequest>(*envelope); fetch && reply) {
                std::lock_guard lock(m_mutex);
                m_sent.push_back(
                    {std::chrono::steady_clock::now(), m_table.describe(fetch->resource)->chunkLength(fetch->index)});
            }
            (void)sendReply(m_socket, request->route,
                reply ? *reply : encodeErrorReply(envelope->id, Error::make("unknown_type", "not served here")));
        }
    }

    const ResourceTable& m_table;
    zmq::socket_t m_socket;
    std::mutex m_mutex;
    std::vector<uint64_t> m_fetched;
    std::vector<Sent> m_sent;
    std::atomic<bool> m_stop{false};
    std::thread m_thread;
};

} // namespace crowdtrain::testing
