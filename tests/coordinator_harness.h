#pragma once

// What tst_coordinator and tst_coordinator_restart share: a crowdtrain-server
// process on loopback (started by the test), volunteers speaking the
// protocol to it directly (join, task, upload and submit), an event
// subscriber, and a prepared text (the data every spec of the tests uses).

// libtorch first: Qt's `slots` macro breaks its headers.
#include "engine/diloco/flat_params.h"

#include "coordinator_fixtures.h"
#include "coordinator_process.h"
#include "protocol_client.h"

#include "engine/diloco/codec.h"
#include "engine/diloco/sparse_codec.h"
#include "engine/token_shard.h"
#include "net/coordinator/state_store.h"
#include "net/transfer/download.h"
#include "net/transfer/sha256.h"
#include "net/transfer/socket_source.h"
#include "net/transport/client.h"
#include "net/transport/curve_keys.h"
#include "net/transport/curve_socket.h"
#include "net/transport/pirate.h"
#include "net/wire/events.h"
#include "net/wire/messages.h"

#include <QTemporaryDir>
#include <functional>
#include <numeric>
#include <random>
#include <set>

namespace crowdtrain::testing {

struct Volunteer {
    std::unique_ptr<net::Client> client;
    net::JoinReply joined;
    std::string key;
};

class CoordinatorHarness {
protected:
    QTemporaryDir m_dir;
    zmq::context_t m_context;
    ServerProcess m_server;
    std::vector<std::string> m_rejections;

    Volunteer join(const std::string& name, const ServerProcess* server = nullptr,
        std::optional<net::CurveKeyPair> identity = std::nullopt)
    {
        if (!server)
            server = &m_server;
        auto keys = identity ? Result<net::CurveKeyPair>(*identity) : net::generateKeyPair();
        if (!keys)
            qFatal("no keys");
        Volunteer v;
        v.key = keys->publicKey;
        auto client = net::Client::connect(m_context, {server->endpoint, server->publicKey, *keys});
        if (!client)
            qFatal("connect: %s", client.error().message.c_str());
        v.client = std::move(*client);
        auto joined = v.client->request<net::JoinReply>(net::JoinRequest{"tiny", name, "test", "CPU"}, 10000);
        if (!joined)
            qFatal("join: %s", joined.error().message.c_str());
        v.joined = *joined;
        return v;
    }

    net::Task task(Volunteer& v)
    {
        auto reply = v.client->request<net::GetTaskReply>(
            net::GetTaskRequest{"tiny", v.joined.session, v.joined.version}, 10000);
        if (!reply || !reply->task)
            qFatal("no task: %s", reply ? "none offered" : reply.error().message.c_str());
        return *reply->task;
    }

    // Uploads `payload` for the task and submits it with `tweak` applied.
    Result<net::SubmitReply> submit(Volunteer& v, const net::Task& t, const std::string& payload, uint64_t tokens,
        const std::function<void(net::SubmitRequest&)>& tweak = {}, int timeoutMs = 20000)
    {
        const uint64_t chunk = v.joined.chunkBytes;
        uint64_t index = 0;
        for (uint64_t at = 0; at < payload.size(); at += chunk, ++index) {
            auto up = v.client->request<net::UploadChunkReply>(
                net::UploadChunkRequest{"tiny", v.joined.session, t.taskId, index, payload.substr(at, chunk)});
            if (!up)
                return up.error();
        }
        net::SubmitRequest s{"tiny", v.joined.session, t.taskId, t.round, t.version, tokens, 1000, 3.5, v.joined.codec,
            net::manifestElements(v.joined.manifest), payload.size(), index, net::sha256Hex(payload)};
        if (tweak)
            tweak(s);
        return v.client->request<net::SubmitReply>(s, timeoutMs);
    }

    // A subscriber to every event of the project, returned once its Curve
    // handshake with the PUB socket has completed (a PUB drops what it
    // publishes before a subscription reaches it). The handshake is watched
    // from before the socket connects, so it cannot be missed; the
    // subscription is the first message the SUB socket sends on that
    // connection, ahead of the requests (each behind a handshake of its own)
    // that make the server publish. Options as makeCurveClientSocket's.
    zmq::socket_t subscribe()
    {
        struct HandshakeWatch : zmq::monitor_t {
            bool succeeded = false;
            bool failed = false;
            void on_event_handshake_succeeded(const zmq_event_t&, const char*) override { succeeded = true; }
            void on_event_handshake_failed_no_detail(const zmq_event_t&, const char*) override { failed = true; }
            void on_event_handshake_failed_protocol(const zmq_event_t&, const char*) override { failed = true; }
            void on_event_handshake_failed_auth(const zmq_event_t&, const char*) override { failed = true; }
        };
        static int monitors = 0;
        auto keys = net::generateKeyPair();
        if (!keys)
            qFatal("no keys");
        zmq::socket_t socket(m_context, zmq::socket_type::sub);
        socket.set(zmq::sockopt::linger, 0);
        socket.set(zmq::sockopt::maxmsgsize, int64_t(1 << 20));
        socket.set(zmq::sockopt::handshake_ivl, net::kHandshakeTimeoutMs);
        socket.set(zmq::sockopt::curve_serverkey, m_server.publicKey);
        socket.set(zmq::sockopt::curve_publickey, keys->publicKey);
        socket.set(zmq::sockopt::curve_secretkey, keys->secretKey);
        socket.set(zmq::sockopt::subscribe, "tiny.");
        HandshakeWatch watch;
        watch.init(socket, "inproc://tst-coordinator-subscriber-" + std::to_string(++monitors),
            ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL
                | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH);
        socket.connect(m_server.events);
        const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(net::kHandshakeTimeoutMs);
        while (!watch.succeeded && !watch.failed && std::chrono::steady_clock::now() < until)
            watch.check_event(100);
        if (!watch.succeeded)
            qFatal("the event subscriber's handshake with %s %s", m_server.events.c_str(),
                watch.failed ? "failed" : "did not complete within the handshake timeout");
        return socket;
    }

    // The next event of type E on `socket` within timeoutMs that `wanted`
    // accepts (others are skipped).
    template <typename E>
    std::optional<E> nextEvent(
        zmq::socket_t& socket, int timeoutMs, const std::function<bool(const E&)>& wanted = nullptr)
    {
        const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
        while (std::chrono::steady_clock::now() < until) {
            socket.set(zmq::sockopt::rcvtimeo, 100);
            zmq::message_t topic, body;
            if (!socket.recv(topic) || !topic.more() || !socket.recv(body))
                continue;
            auto decoded = net::decodeEventFrames(topic.to_string_view(), body.to_string_view());
            if (!decoded)
                qFatal("bad event: %s", decoded.error().message.c_str());
            if (decoded->envelope.type == E::kType) {
                auto event = net::decodeEvent<E>(*decoded);
                if (!event)
                    qFatal("bad %s event: %s", decoded->envelope.type.c_str(), event.error().message.c_str());
                if (!wanted || wanted(*event))
                    return *event;
            }
        }
        return std::nullopt;
    }

    // In a project of one task a round: submits a task of `a` at `version`
    // and waits for the round to close. Whether it did.
    bool closeRoundAlone(Volunteer& a, uint64_t version, uint32_t seed)
    {
        a.joined.version = version;
        const int64_t n = int64_t(net::manifestElements(a.joined.manifest));
        const auto delta = randomDelta(n, 1e-3f, seed);
        auto r = submit(a, task(a), diloco::encode(diloco::Codec::Int8, delta.data(), n), 20 * 8 * 32);
        if (!r) {
            qWarning("submit at version %llu: %s", (unsigned long long)version, r.error().message.c_str());
            return false;
        }
        return QTest::qWaitFor([&] { return heartbeat(a, version).version == version + 1; }, 20000);
    }

    net::HeartbeatReply heartbeat(Volunteer& v, uint64_t version)
    {
        auto hb = v.client->request<net::HeartbeatReply>(net::HeartbeatRequest{"tiny", v.joined.session, version});
        if (!hb)
            qFatal("heartbeat: %s", hb.error().message.c_str());
        return *hb;
    }

    uint64_t m_elements = 0;
    std::filesystem::path m_specFile;

    // Prepares the text in the test's folder (its "data" folder) and, with
    // `startServer`, starts the shared server on a spec of two tasks a
    // round with a checkpoint every round.
    bool prepare(bool startServer)
    {
        if (!m_dir.isValid())
            return false;
        const std::filesystem::path dir = m_dir.path().toStdString();
        const auto data = preparedText(dir);
        m_specFile = writeSpec(dir, data, SpecOptions{.tasksPerRound = 2, .checkpointEvery = 1});
        return !startServer || m_server.start(m_specFile, dir / "state");
    }
};

} // namespace crowdtrain::testing
