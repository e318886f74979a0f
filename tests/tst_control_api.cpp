// The control API (net/control) over real ipc:// sockets in a temporary
// folder: requests and their errors, timeouts and reconnection, events,
// stop(). The control folder and its socket files are tst_control_dir's;
// Value and its wire forms tst_control_value's.
// Nothing sleeps for a fixed time: every wait is for a reply or an event,
// with a deadline.
#include "control_fixtures.h"
#include "control_server_fixtures.h"
#include "core/clock.h"
#include "net/control/control_client.h"
#include "net/control/control_paths.h"
#include "net/control/control_server.h"
#include "net/control/event_subscriber.h"
#include "net/control/value.h"

#include <QTemporaryDir>
#include <QTest>

#include <chrono>
#include <future>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <zmq.hpp>

using namespace crowdtrain;
using namespace crowdtrain::control;
using namespace std::chrono_literals;
using crowdtrain::testing::connectClient;
using crowdtrain::testing::demoHandler;
using crowdtrain::testing::nestedArrays;
using crowdtrain::testing::ServerThread;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// A DEALER that sends whatever frames it is given: a hostile or broken client.
class RawClient {
public:
    explicit RawClient(const fs::path& dir)
        : m_socket(m_context, zmq::socket_type::dealer)
    {
        m_socket.set(zmq::sockopt::linger, 0);
        m_socket.connect(controlEndpoint(dir));
    }

    void send(const std::vector<std::string>& frames)
    {
        for (std::size_t i = 0; i < frames.size(); ++i)
            m_socket.send(
                zmq::buffer(frames[i]), i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }

    // The decoded reply, or nil when none comes within `timeout`.
    Value receive(std::chrono::milliseconds timeout)
    {
        zmq::pollitem_t item{m_socket.handle(), 0, ZMQ_POLLIN, 0};
        if (zmq::poll(&item, 1, timeout) == 0)
            return Value();
        zmq::message_t frame;
        if (!m_socket.recv(frame) || frame.more())
            return Value();
        auto reply = decode(frame.to_string_view(), DecodeLimits::reply());
        return reply ? *reply : Value();
    }

private:
    zmq::context_t m_context;
    zmq::socket_t m_socket;
};

std::unique_ptr<EventSubscriber> subscribe(const fs::path& dir, std::vector<std::string> topics = {})
{
    auto subscriber = EventSubscriber::connect(dir, std::move(topics));
    if (!subscriber)
        qFatal("%s", subscriber.error().message.c_str());
    return std::move(*subscriber);
}

// PUB/SUB drops what is published before the subscription reaches the
// publisher, so publish `type` until one arrives (or the deadline passes).
bool waitUntilSubscribed(ControlServer& server, EventSubscriber& subscriber, const std::string& type)
{
    const auto deadline = Clock::now() + 5s;
    while (Clock::now() < deadline) {
        server.publish(type, Value::map().set("warmup", true));
        if (auto event = subscriber.next(20); event && event->type == type)
            return true;
    }
    return false;
}

// The next event that is not a warm-up one.
std::optional<Event> nextReal(EventSubscriber& subscriber, int timeoutMs)
{
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeoutMs);
    while (true) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        auto event = subscriber.next(std::max<int>(0, int(left.count())));
        if (!event || !event->body["warmup"].toBool())
            return event;
    }
}

} // namespace

class TestControlApi : public QObject {
    Q_OBJECT

private:
    crowdtrain::testing::FreshDirs m_dirs;

private slots:
    void initTestCase() { QVERIFY(m_dirs.valid()); }

    // ---- Requests ------------------------------------------------------------

    void callsRoundTrip()
    {
        const fs::path dir = m_dirs.next();
        ServerThread server(dir);
        auto client = connectClient(dir);
        const Value body = Value::map()
                               .set("text", "héllo")
                               .set("n", -3)
                               .set("blob", Value::binary(std::string(1000, '\xab')))
                               .set("deep", Value::map().set("list", nestedArrays(5)));
        for (int i = 0; i < 20; ++i) {
            auto reply = client->call("echo", body);
            QVERIFY2(reply.ok(), reply.ok() ? "" : reply.error().message.c_str());
            QCOMPARE(*reply, body);
        }
        QCOMPARE(*client->call("echo"), Value::map()); // the default body
        QCOMPARE(*client->call("nothing"), Value::map()); // a nil reply is an empty map
    }

    void handlerErrors()
    {
        const fs::path dir = m_dirs.next();
        ServerThread server(dir);
        auto client = connectClient(dir);

        auto failed = client->call("fail", Value::map().set("name", "nope"));
        QCOMPARE(failed.error().code, std::string("unknown_project"));
        QCOMPARE(failed.error().message, std::string("no project named nope"));

        auto thrown = client->call("throw");
        QCOMPARE(thrown.error().code, std::string("internal"));
        QVERIFY(thrown.error().message.find("the handler exploded") != std::string::npos);

        QCOMPARE(client->call("not_a_map").error().code, std::string("internal"));
        QCOMPARE(client->call("what").error().code, std::string("unknown_type"));
        QVERIFY(client->call("echo").ok()); // and it keeps serving
    }

    void clientRefusesBadRequests()
    {
        const fs::path dir = m_dirs.next();
        ServerThread server(dir);
        auto client = connectClient(dir);
        const auto start = Clock::now();
        // Over 1 MiB, too deep (the envelope is level 1), not a map, a bad
        // type: refused before sending, with the daemon's codes.
        QCOMPARE(client->call("echo", Value::map().set("s", std::string(1u << 20, 'x'))).error().code,
            std::string("too_large"));
        QCOMPARE(client->call("echo", Value::map().set("d", nestedArrays(7))).error().code, std::string("too_large"));
        QCOMPARE(client->call("echo", Value(3)).error().code, std::string("malformed"));
        QCOMPARE(client->call("has space").error().code, std::string("malformed"));
        QCOMPARE(client->call("").error().code, std::string("malformed"));
        QVERIFY(Clock::now() - start < 2s);
        // Level 8 in all passes: the envelope 1, the body 2, six arrays 3 to 8.
        QVERIFY(client->call("echo", Value::map().set("d", nestedArrays(6))).ok());
    }

    // Ids and versions are uint64: 2^63 and above are read, echoed, and
    // (for v) answered "unsupported_version", never "malformed".
    void bigIdsAndVersions()
    {
        const fs::path dir = m_dirs.next();
        ServerThread server(dir);
        RawClient raw(dir);
        for (const uint64_t id : {uint64_t(1) << 63, UINT64_MAX}) {
            raw.send({encode(Value::map().set("v", 1).set("type", "echo").set("id", id).set("body", Value::map()))});
            const Value reply = raw.receive(5s);
            QCOMPARE(reply["ok"], Value(true));
            QCOMPARE(reply["id"].toUInt(), id);
            QCOMPARE(reply["id"].kind(), Value::Kind::UInt);
        }
        raw.send({encode(
            Value::map().set("v", UINT64_MAX).set("type", "echo").set("id", UINT64_MAX).set("body", Value::map()))});
        const Value reply = raw.receive(5s);
        QCOMPARE(reply["error"]["code"], Value("unsupported_version"));
        QCOMPARE(reply["id"].toUInt(), UINT64_MAX);
        auto decoded = decodeReply(encodeReply({"echo", UINT64_MAX}, Value::map()));
        QVERIFY(decoded);
        QCOMPARE(decoded->id, UINT64_MAX);
    }

    // A handler may answer later, from another thread: a quick request
    // sent after a slow one is answered first, each reply with its id.
    void answersOutOfOrder()
    {
        const fs::path dir = m_dirs.next();
        std::mutex heldMutex;
        std::vector<Responder> held;
        ServerThread server(dir, [&](const Request& request, Responder respond) {
            if (request.type == "slow") {
                std::lock_guard lock(heldMutex);
                held.push_back(std::move(respond));
                return;
            }
            respond(request.body);
        });
        RawClient raw(dir);
        raw.send({encodeRequest("slow", 1, Value::map())});
        raw.send({encodeRequest("echo", 2, Value::map())});
        QCOMPARE(raw.receive(5s)["id"], Value(2));
        QVERIFY(raw.receive(100ms).isNil()); // the slow one is still working
        std::thread elsewhere([&] {
            std::lock_guard lock(heldMutex);
            held.front()(Value::map().set("done", true));
        });
        elsewhere.join();
        const Value late = raw.receive(5s);
        QCOMPARE(late["id"], Value(1));
        QCOMPARE(late["type"], Value("slow"));
        QCOMPARE(late["body"]["done"], Value(true));
        // A second answer to the same request is ignored.
        held.front()(Value::map());
        QVERIFY(raw.receive(100ms).isNil());
    }

    // At most kMaxRequestsInFlight wait for answers; one more is "busy" at
    // once. A request whose Responder is dropped unanswered is "internal".
    void inFlightRequestsAreBounded()
    {
        const fs::path dir = m_dirs.next();
        std::mutex heldMutex;
        std::vector<Responder> held;
        ServerThread server(dir, [&](const Request& request, Responder respond) {
            if (request.type == "drop")
                return;
            std::lock_guard lock(heldMutex);
            held.push_back(std::move(respond));
        });
        std::vector<std::unique_ptr<RawClient>> clients;
        for (std::size_t i = 0; i < kMaxRequestsInFlight; ++i) {
            clients.push_back(std::make_unique<RawClient>(dir));
            clients.back()->send({encodeRequest("hold", i + 1, Value::map())});
        }
        QTRY_VERIFY_WITH_TIMEOUT(
            [&] {
                std::lock_guard lock(heldMutex);
                return held.size() == kMaxRequestsInFlight;
            }(),
            10000);
        RawClient extra(dir);
        extra.send({encodeRequest("hold", 1000, Value::map())});
        const Value refused = extra.receive(5s);
        QCOMPARE(refused["error"]["code"], Value("busy"));
        QCOMPARE(refused["id"], Value(1000));
        {
            std::lock_guard lock(heldMutex);
            for (Responder& r : held)
                r(Value::map());
            held.clear();
        }
        for (auto& c : clients)
            QCOMPARE(c->receive(5s)["ok"], Value(true));
        extra.send({encodeRequest("drop", 1001, Value::map())});
        const Value dropped = extra.receive(5s);
        QCOMPARE(dropped["error"]["code"], Value("internal"));
        QCOMPARE(dropped["id"], Value(1001));
    }

    // A client that keeps kReplyQueueLength requests in flight (a new one
    // for each reply it reads) gets every reply, however fast they come.
    void aFullWindowLosesNoReply()
    {
        const fs::path dir = m_dirs.next();
        ServerThread server(dir, [](const Request& request) -> Result<Value> { return request.body; });
        RawClient raw(dir);
        constexpr uint64_t kRequests = 2000;
        uint64_t sent = 0;
        for (; sent < uint64_t(kReplyQueueLength); ++sent)
            raw.send({encodeRequest("echo", sent + 1, Value::map().set("n", int64_t(sent + 1)))});
        std::vector<bool> answered(kRequests + 1, false);
        for (uint64_t received = 0; received < kRequests; ++received) {
            const Value reply = raw.receive(5s);
            QVERIFY2(!reply.isNil(),
                ("reply " + std::to_string(received + 1) + " of " + std::to_string(kRequests) + " never came").c_str());
            QCOMPARE(reply["ok"], Value(true));
            const uint64_t id = reply["id"].toUInt();
            QVERIFY(id >= 1 && id <= kRequests && !answered[id]);
            QCOMPARE(reply["body"]["n"].toUInt(), id);
            answered[id] = true;
            if (sent < kRequests) {
                ++sent;
                raw.send({encodeRequest("echo", sent, Value::map().set("n", int64_t(sent)))});
            }
        }
    }

    // One client with kReplyQueueLength requests waiting for answers: one
    // more is "busy" at once, and the waiting ones are all answered.
    void aClientsWaitingRequestsAreBounded()
    {
        const fs::path dir = m_dirs.next();
        std::mutex heldMutex;
        std::vector<Responder> held;
        ServerThread server(dir, [&](const Request&, Responder respond) {
            std::lock_guard lock(heldMutex);
            held.push_back(std::move(respond));
        });
        RawClient raw(dir);
        for (int i = 1; i <= kReplyQueueLength; ++i)
            raw.send({encodeRequest("hold", uint64_t(i), Value::map())});
        QTRY_VERIFY_WITH_TIMEOUT(
            [&] {
                std::lock_guard lock(heldMutex);
                return held.size() == std::size_t(kReplyQueueLength);
            }(),
            10000);
        raw.send({encodeRequest("hold", 100, Value::map())});
        const Value refused = raw.receive(5s);
        QCOMPARE(refused["id"], Value(100));
        QCOMPARE(refused["error"]["code"], Value("busy"));
        // Another client is not held back by this one.
        RawClient other(dir);
        other.send({encodeRequest("hold", 1, Value::map())});
        QTRY_VERIFY_WITH_TIMEOUT(
            [&] {
                std::lock_guard lock(heldMutex);
                return held.size() == std::size_t(kReplyQueueLength) + 1;
            }(),
            10000);
        {
            std::lock_guard lock(heldMutex);
            for (Responder& r : held)
                r(Value::map());
            held.clear();
        }
        for (int i = 0; i < kReplyQueueLength; ++i)
            QCOMPARE(raw.receive(5s)["ok"], Value(true));
        QCOMPARE(other.receive(5s)["ok"], Value(true));
        // Answered, the client may send as many again.
        raw.send({encodeRequest("hold", 200, Value::map())});
        QTRY_VERIFY_WITH_TIMEOUT(
            [&] {
                std::lock_guard lock(heldMutex);
                return held.size() == 1;
            }(),
            10000);
    }

    // Clients that never read hold at most the bound of replies, all
    // together: past it a reply is replaced by "busy"; once they leave,
    // their share is free again.
    void unreadRepliesAreBounded()
    {
        const fs::path dir = m_dirs.next();
        const std::string big(64 << 10, 'x');
        ServerThread server(dir, [&](const Request&) -> Result<Value> { return Value::map().set("big", big); });
        server.server().setHeldReplyBudget(4u << 20);
        {
            std::vector<std::unique_ptr<RawClient>> silent;
            for (int c = 0; c < 10; ++c) {
                silent.push_back(std::make_unique<RawClient>(dir));
                for (int k = 0; k < kReplyQueueLength; ++k)
                    silent.back()->send({encodeRequest("big", uint64_t(k + 1), Value::map())});
            }
            RawClient reader(dir);
            // Whatever order the requests are served in, the bound is
            // reached: 10 x 16 x 64 KiB is 10 MiB.
            QTRY_VERIFY_WITH_TIMEOUT(
                [&] {
                    reader.send({encodeRequest("big", 1, Value::map())});
                    const Value reply = reader.receive(5s);
                    return reply["error"]["code"] == Value("busy");
                }(),
                20000);
        }
        // The silent clients have gone (their sockets are closed).
        auto client = connectClient(dir);
        QTRY_VERIFY_WITH_TIMEOUT(client->call("big").ok(), 20000);
    }

    void unsupportedVersion()
    {
        const fs::path dir = m_dirs.next();
        ServerThread server(dir);
        RawClient raw(dir);
        raw.send({encode(Value::map().set("v", 2).set("type", "echo").set("id", 7).set("body", Value::map()))});
        const Value reply = raw.receive(5s);
        QCOMPARE(reply["v"], Value(1));
        QCOMPARE(reply["id"], Value(7));
        QCOMPARE(reply["type"], Value("echo"));
        QCOMPARE(reply["ok"], Value(false));
        QCOMPARE(reply["error"]["code"], Value("unsupported_version"));
    }

    void malformedRequests_data()
    {
        QTest::addColumn<QList<QByteArray>>("frames");
        QTest::addColumn<qulonglong>("id");
        QTest::addColumn<QString>("code");
        const auto bytes = [](const Value& value) { return QByteArray::fromStdString(encode(value)); };
        QTest::newRow("garbage") << QList<QByteArray>{QByteArray("\xc1 not msgpack")} << 0ull
                                 << QStringLiteral("malformed");
        QTest::newRow("empty frame") << QList<QByteArray>{QByteArray()} << 0ull << QStringLiteral("malformed");
        QTest::newRow("not a map") << QList<QByteArray>{bytes(Value(5))} << 0ull << QStringLiteral("malformed");
        QTest::newRow("no body") << QList<QByteArray>{bytes(Value::map().set("v", 1).set("type", "echo").set("id", 9))}
                                 << 9ull << QStringLiteral("malformed");
        QTest::newRow("negative id") << QList<QByteArray>{bytes(
            Value::map().set("v", 1).set("type", "echo").set("id", -1).set("body", Value::map()))}
                                     << 0ull << QStringLiteral("malformed");
        QTest::newRow("no version") << QList<QByteArray>{bytes(
            Value::map().set("type", "echo").set("id", 4).set("body", Value::map()))}
                                    << 4ull << QStringLiteral("malformed");
        QTest::newRow("bad type") << QList<QByteArray>{bytes(
            Value::map().set("v", 1).set("type", "a b").set("id", 5).set("body", Value::map()))}
                                  << 5ull << QStringLiteral("malformed");
        QTest::newRow("two frames") << QList<QByteArray>{QByteArray("x"),
            bytes(Value::map().set("v", 1).set("type", "echo").set("id", 6).set("body", Value::map()))}
                                    << 0ull << QStringLiteral("malformed");
        QTest::newRow("too deep") << QList<QByteArray>{bytes(Value::map()
                                                                 .set("v", 1)
                                                                 .set("type", "echo")
                                                                 .set("id", 3)
                                                                 .set("body", Value::map().set("d", nestedArrays(7))))}
                                  << 0ull << QStringLiteral("too_large");
    }

    void malformedRequests()
    {
        QFETCH(QList<QByteArray>, frames);
        QFETCH(qulonglong, id);
        QFETCH(QString, code);
        const fs::path dir = m_dirs.next();
        ServerThread server(dir, [](const Request& request) -> Result<Value> {
            if (request.type != "echo" || request.body.isNil())
                throw std::logic_error("a bad request reached the handler");
            return request.body;
        });
        RawClient raw(dir);
        std::vector<std::string> parts;
        for (const QByteArray& frame : frames)
            parts.push_back(frame.toStdString());
        raw.send(parts);
        const Value reply = raw.receive(5s);
        QVERIFY2(reply.isMap(), "no reply");
        QCOMPARE(reply["ok"], Value(false));
        QCOMPARE(QString::fromStdString(reply["error"]["code"].toString()), code);
        QCOMPARE(reply["id"].toUInt(), uint64_t(id));
        // The server keeps serving, the raw client and others.
        raw.send({encode(Value::map().set("v", 1).set("type", "echo").set("id", 77).set("body", Value::map()))});
        const Value good = raw.receive(5s);
        QCOMPARE(good["id"], Value(77));
        QCOMPARE(good["ok"], Value(true));
        QVERIFY(connectClient(dir)->call("echo").ok());
    }

    void oversizeRequestIsDropped()
    {
        const fs::path dir = m_dirs.next();
        ServerThread server(dir);
        RawClient raw(dir);
        // Over ZMQ_MAXMSGSIZE: never read (the connection is dropped), so no reply.
        std::string huge = encode(Value::map()
                                      .set("v", 1)
                                      .set("type", "echo")
                                      .set("id", 1)
                                      .set("body", Value::binary(std::string(1u << 20, 'x'))));
        QVERIFY(huge.size() > (1u << 20));
        raw.send({huge});
        const Value reply = raw.receive(300ms);
        QVERIFY(reply.isNil() || reply["error"]["code"] == Value("too_large"));
        QVERIFY(connectClient(dir)->call("echo").ok());
    }

    void timeoutThenDaemonReturns()
    {
        const fs::path dir = m_dirs.next();
        std::unique_ptr<ControlClient> client;
        {
            ServerThread server(dir);
            client = connectClient(dir);
            QVERIFY(client->call("echo").ok());
        }
        const auto start = Clock::now();
        auto missed = client->call("echo", Value::map(), 200);
        const auto elapsed = Clock::now() - start;
        QCOMPARE(missed.error().code, std::string("no_daemon"));
        QVERIFY(missed.error().message.find("within 200 ms") != std::string::npos);
        QVERIFY(missed.error().message.find(dir.string()) != std::string::npos);
        QVERIFY(elapsed >= 190ms);
        QVERIFY(elapsed < 2s);

        ServerThread server(dir);
        auto back = client->call("echo", Value::map().set("again", true));
        QVERIFY2(back.ok(), back.ok() ? "" : back.error().message.c_str());
        QCOMPARE((*back)["again"], Value(true));
    }

    void lateReplyIsNotTakenForTheNext()
    {
        const fs::path dir = m_dirs.next();
        std::promise<void> release;
        std::shared_future<void> released = release.get_future().share();
        ServerThread server(dir, [released](const Request& request) -> Result<Value> {
            if (request.type == "slow")
                released.wait_for(10s);
            return Value::map().set("type", request.type);
        });
        auto client = connectClient(dir);
        QCOMPARE(client->call("slow", Value::map(), 100).error().code, std::string("no_daemon"));
        release.set_value();
        auto next = client->call("echo");
        QVERIFY(next.ok());
        QCOMPARE((*next)["type"], Value("echo"));
    }

    void stopReturnsPromptly()
    {
        const fs::path dir = m_dirs.next();
        ServerThread server(dir);
        auto client = connectClient(dir);
        QVERIFY(client->call("echo").ok()); // run() is serving
        const auto start = Clock::now();
        QVERIFY(server.stopWithin(2s));
        QVERIFY(Clock::now() - start < 1s);

        // A failure of the sockets ends run() with an error (the daemon
        // then exits non-zero), not as a stop.
        auto broken = ControlServer::open(m_dirs.next(), demoHandler);
        QVERIFY(broken.ok());
        auto failed = std::async(std::launch::async, [&] { return (*broken)->run(); });
        QVERIFY(connectClient((*broken)->dir())->call("echo").ok());
        (*broken)->breakSockets();
        QCOMPARE(failed.wait_for(5s), std::future_status::ready);
        const Status ran = failed.get();
        QVERIFY(!ran.ok());
        QCOMPARE(ran.error().code, std::string("zmq_error"));

        // stop() before run(): run() returns at once.
        auto idle = ControlServer::open(m_dirs.next(), demoHandler);
        QVERIFY(idle.ok());
        (*idle)->stop();
        auto finished = std::async(std::launch::async, [&] { return (*idle)->run(); });
        QCOMPARE(finished.wait_for(2s), std::future_status::ready);
        QVERIFY(finished.get().ok());
    }

    // ---- Events -------------------------------------------------------------

    void eventsArriveInOrder()
    {
        const fs::path dir = m_dirs.next();
        ServerThread server(dir);
        auto subscriber = subscribe(dir);
        QVERIFY(subscriber->fd() >= 0);
        QVERIFY(waitUntilSubscribed(server.server(), *subscriber, "hello"));

        const auto nowMs = uint64_t(core::unixNowMs());
        for (int i = 0; i < 200; ++i)
            server.server().publish("tick", Value::map().set("i", i));
        uint64_t lastSeq = 0;
        for (int i = 0; i < 200; ++i) {
            auto event = nextReal(*subscriber, 5000);
            QVERIFY2(event, qPrintable(QStringLiteral("event %1 did not arrive").arg(i)));
            QCOMPARE(event->type, std::string("tick"));
            QCOMPARE(event->body["i"], Value(i));
            if (lastSeq != 0)
                QCOMPARE(event->seq, lastSeq + 1);
            lastSeq = event->seq;
            QVERIFY(event->timeMs + 60000 > nowMs && event->timeMs < nowMs + 60000);
        }
        // Invalid events are not sent and take no seq.
        server.server().publish("has space", Value::map());
        server.server().publish("tick", Value(3));
        server.server().publish("tick", Value::map().set("i", 200));
        auto after = nextReal(*subscriber, 5000);
        QVERIFY(after);
        QCOMPARE(after->body["i"], Value(200));
        QCOMPARE(after->seq, lastSeq + 1);
        QVERIFY(!subscriber->next(0)); // drained
    }

    void topicsMatchExactly()
    {
        const fs::path dir = m_dirs.next();
        ServerThread server(dir);
        auto subscriber = subscribe(dir, {"job"});
        QVERIFY(waitUntilSubscribed(server.server(), *subscriber, "job"));
        server.server().publish("jobs", Value::map()); // a prefix match for ZeroMQ, not for us
        server.server().publish("other", Value::map());
        server.server().publish("job", Value::map().set("n", 1));
        auto event = nextReal(*subscriber, 5000);
        QVERIFY(event);
        QCOMPARE(event->type, std::string("job"));
        QCOMPARE(event->body["n"], Value(1));
    }

    void publishFromManyThreads()
    {
        const fs::path dir = m_dirs.next();
        ServerThread server(dir);
        auto subscriber = subscribe(dir, {"tick"});
        QVERIFY(waitUntilSubscribed(server.server(), *subscriber, "tick"));
        std::vector<std::thread> publishers;
        for (int t = 0; t < 4; ++t)
            publishers.emplace_back([&server, t] {
                for (int i = 0; i < 50; ++i)
                    server.server().publish("tick", Value::map().set("thread", t).set("i", i));
            });
        for (std::thread& thread : publishers)
            thread.join();
        uint64_t lastSeq = 0;
        std::vector<int> nextPerThread(4, 0);
        for (int received = 0; received < 200; ++received) {
            auto event = nextReal(*subscriber, 5000);
            QVERIFY(event);
            QVERIFY(lastSeq == 0 || event->seq == lastSeq + 1);
            lastSeq = event->seq;
            const auto thread = event->body["thread"].toInt();
            QCOMPARE(event->body["i"].toInt(), int64_t(nextPerThread[thread]++));
        }
    }
};

QTEST_GUILESS_MAIN(TestControlApi)
#include "tst_control_api.moc"