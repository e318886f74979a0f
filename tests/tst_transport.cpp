// CurveZMQ transport on 127.0.0.1: key files, the ZAP handler, Curve sockets
// and the request client.
#include "core/file_io.h"
#include "net/transport/client.h"
#include "net/transport/curve_keys.h"
#include "net/transport/curve_socket.h"
#include "net/transport/pirate.h"
#include "net/transport/zap_authenticator.h"
#include "net/wire/messages.h"

#include <QTemporaryDir>
#include <QTest>

#include <atomic>
#include <fstream>
#include <mutex>
#include <random>
#include <sys/stat.h>
#include <thread>

using namespace crowdtrain;
using namespace crowdtrain::net;

namespace {

CurveKeyPair freshKeys()
{
    auto keys = generateKeyPair();
    if (!keys)
        qFatal("%s", keys.error().message.c_str());
    return *keys;
}

// A coordinator stand-in: answers my_stats with the caller's authenticated
// key, ignores the first `ignoreFirst` requests, counts what arrives.
class EchoServer {
public:
    EchoServer(zmq::context_t& context, const CurveKeyPair& keys, int ignoreFirst = 0)
        : m_ignore(ignoreFirst)
    {
        auto socket = makeCurveServerSocket(context, zmq::socket_type::router, keys, "tcp://127.0.0.1:*");
        if (!socket)
            qFatal("%s", socket.error().message.c_str());
        m_socket = std::move(*socket);
        endpoint = lastEndpoint(m_socket);
        m_thread = std::thread([this] { run(); });
    }
    ~EchoServer()
    {
        m_stop = true;
        m_thread.join();
    }

    std::string endpoint;
    std::atomic<int> received{0};
    std::string lastPeerKey()
    {
        std::lock_guard lock(m_mutex);
        return m_lastPeerKey;
    }

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
            {
                std::lock_guard lock(m_mutex);
                m_lastPeerKey = request->peerKey;
            }
            if (++received <= m_ignore)
                continue;
            auto envelope = decodeEnvelope(request->payload, EnvelopeKind::Request);
            const std::string reply = envelope
                ? encodeReply(MyStatsReply{{"", request->peerKey, 1, 0, 0, 0, ""}, 1, 1, 1}, envelope->id)
                : encodeErrorReply(bestEffortRequestId(request->payload), envelope.error());
            (void)sendReply(m_socket, request->route, reply);
        }
    }

    zmq::socket_t m_socket;
    std::mutex m_mutex;
    std::string m_lastPeerKey;
    int m_ignore;
    std::atomic<bool> m_stop{false};
    std::thread m_thread;
};

bool waitFor(const std::function<bool()>& condition, int timeoutMs)
{
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
    while (std::chrono::steady_clock::now() < deadline) {
        if (condition())
            return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return condition();
}

} // namespace

class TestTransport : public QObject {
    Q_OBJECT

private slots:
    void keyPairs()
    {
        const CurveKeyPair a = freshKeys();
        const CurveKeyPair b = freshKeys();
        QCOMPARE(a.publicKey.size(), std::size_t(40));
        QCOMPARE(a.secretKey.size(), std::size_t(40));
        QVERIFY(a.publicKey != b.publicKey);
        auto parsed = parseKeyPairFile(formatKeyPairFile(a), "k");
        QVERIFY(parsed.ok());
        QVERIFY(*parsed == a);
    }

    void keyFileRoundTrip()
    {
        QTemporaryDir dir;
        const std::filesystem::path file = std::filesystem::path(dir.path().toStdString()) / "identity" / "curve.key";
        auto created = loadOrCreateKeyPair(file);
        QVERIFY(created.ok());
        struct stat info { };
        QCOMPARE(::stat(file.c_str(), &info), 0);
        QCOMPARE(int(info.st_mode & 0777), 0600);
        auto loaded = loadOrCreateKeyPair(file);
        QVERIFY(loaded.ok());
        QVERIFY(*loaded == *created);
        // No temporary files are left next to it.
        QCOMPARE(std::distance(std::filesystem::directory_iterator(file.parent_path()), {}), 1);
    }

    void malformedKeyFile_data()
    {
        QTest::addColumn<QByteArray>("text");
        QTest::addColumn<QString>("where");
        const CurveKeyPair a = freshKeys();
        const CurveKeyPair b = freshKeys();
        const auto text = [](const std::string& s) { return QByteArray::fromStdString(s); };
        QTest::newRow("empty") << QByteArray() << ":1:";
        QTest::newRow("wrong magic") << text("ssh-ed25519 AAAA\n") << ":1:";
        QTest::newRow("no secret") << text("crowdtrain-curve-keypair 1\npublic " + a.publicKey + "\n") << "no secret";
        QTest::newRow("short key") << text("crowdtrain-curve-keypair 1\npublic abc\nsecret " + a.secretKey + "\n")
                                   << ":2:";
        QTest::newRow("unknown line") << text(formatKeyPairFile(a) + "colour blue\n") << ":4:";
        QTest::newRow("keys of two pairs")
            << text("crowdtrain-curve-keypair 1\npublic " + a.publicKey + "\nsecret " + b.secretKey + "\n")
            << "does not belong";
        QTest::newRow("binary junk") << QByteArray(5000, '\xff') << "larger than";
    }

    void malformedKeyFile()
    {
        QFETCH(QByteArray, text);
        QFETCH(QString, where);
        QTemporaryDir dir;
        const std::filesystem::path file = std::filesystem::path(dir.path().toStdString()) / "curve.key";
        std::ofstream(file, std::ios::binary).write(text.constData(), text.size());
        auto loaded = loadOrCreateKeyPair(file);
        QVERIFY(!loaded.ok());
        QCOMPARE(loaded.error().code, std::string("malformed_key_file"));
        QVERIFY2(QString::fromStdString(loaded.error().message).contains(where), loaded.error().message.c_str());
        QVERIFY2(QString::fromStdString(loaded.error().message).contains(QStringLiteral("curve.key")),
            loaded.error().message.c_str());
        // The bad file is left for the user to look at, not replaced.
        auto again = core::readFile(file, 1 << 20);
        QVERIFY(again.ok());
        QCOMPARE(QByteArray::fromStdString(*again), text);
    }

    // AtomicFile writes a big file back a window (8 MiB) at a time: pieces
    // of any size across the windows' edges, one write larger than two
    // windows, and a header filled in at the end give exactly the bytes.
    void anAtomicFileWrittenAcrossWriteBackWindowsIsExact()
    {
        QTemporaryDir dir;
        const std::filesystem::path file = std::filesystem::path(dir.path().toStdString()) / "big.bin";
        std::string expected(8, '\0');
        auto out = core::AtomicFile::create(file);
        QVERIFY(out.ok());
        QVERIFY(out->write(expected).ok());
        std::mt19937 random(7);
        auto piece = [&](std::size_t size) {
            std::string bytes(size, '\0');
            for (char& c : bytes)
                c = char(random());
            return bytes;
        };
        for (std::size_t size : {std::size_t(3), std::size_t(1 << 20) + 5, std::size_t(7 << 20), std::size_t(17 << 20),
                 std::size_t(4099), std::size_t(9 << 20) - 1}) {
            const std::string bytes = piece(size);
            QVERIFY(out->write(bytes).ok());
            expected += bytes;
        }
        const std::string header = "HEADER!!";
        QVERIFY(out->writeAt(0, header).ok());
        expected.replace(0, header.size(), header);
        QVERIFY(!std::filesystem::exists(file));
        QVERIFY(out->commit().ok());
        auto written = core::readFile(file);
        QVERIFY(written.ok());
        QCOMPARE(written->size(), expected.size());
        QVERIFY(*written == expected);
    }

    void curveClientIsServedAndIdentified()
    {
        zmq::context_t context;
        auto zap = ZapAuthenticator::start(context);
        QVERIFY(zap.ok());
        QCOMPARE(ZapAuthenticator::start(context).error().code, std::string("address_in_use"));
        const CurveKeyPair server = freshKeys();
        EchoServer echo(context, server);
        const CurveKeyPair volunteer = freshKeys();
        auto client = Client::connect(context, {echo.endpoint, server.publicKey, volunteer});
        QVERIFY(client.ok());
        auto reply = (*client)->request<MyStatsReply>(MyStatsRequest{"tiny"}, 5000);
        if (!reply)
            QFAIL(reply.error().message.c_str());
        QCOMPARE(reply->stats.publicKey, volunteer.publicKey);
        QCOMPARE(echo.lastPeerKey(), volunteer.publicKey);
        QVERIFY((*zap)->accepted() >= 1);
        // A second volunteer is told apart by its key.
        const CurveKeyPair other = freshKeys();
        auto second = Client::connect(context, {echo.endpoint, server.publicKey, other});
        QVERIFY(second.ok());
        auto otherReply = (*second)->request<MyStatsReply>(MyStatsRequest{"tiny"}, 5000);
        QVERIFY(otherReply.ok());
        QCOMPARE(otherReply->stats.publicKey, other.publicKey);
    }

    void plaintextClientIsRefused()
    {
        zmq::context_t context;
        auto zap = ZapAuthenticator::start(context);
        QVERIFY(zap.ok());
        const CurveKeyPair server = freshKeys();
        EchoServer echo(context, server);
        zmq::socket_t plain(context, zmq::socket_type::dealer);
        plain.set(zmq::sockopt::linger, 0);
        plain.connect(echo.endpoint);
        plain.send(zmq::buffer(encodeRequest(MyStatsRequest{"tiny"}, 1)), zmq::send_flags::dontwait);
        zmq::pollitem_t item{plain.handle(), 0, ZMQ_POLLIN, 0};
        QCOMPARE(zmq::poll(&item, 1, std::chrono::milliseconds(500)), 0);
        QCOMPARE(echo.received.load(), 0);
    }

    void zapRefusesNullMechanism()
    {
        // A server socket without CURVE but with a ZAP domain asks the
        // handler about NULL clients: it must say no.
        zmq::context_t context;
        auto zap = ZapAuthenticator::start(context);
        QVERIFY(zap.ok());
        zmq::socket_t server(context, zmq::socket_type::router);
        server.set(zmq::sockopt::linger, 0);
        server.set(zmq::sockopt::zap_domain, kZapDomain);
        server.bind("tcp://127.0.0.1:*");
        zmq::socket_t plain(context, zmq::socket_type::dealer);
        plain.set(zmq::sockopt::linger, 0);
        plain.connect(lastEndpoint(server));
        plain.send(zmq::str_buffer("hello"), zmq::send_flags::dontwait);
        QVERIFY(waitFor([&] { return (*zap)->refused() >= 1; }, 3000));
        QCOMPARE((*zap)->accepted(), uint64_t(0));
        zmq::pollitem_t item{server.handle(), 0, ZMQ_POLLIN, 0};
        QCOMPARE(zmq::poll(&item, 1, std::chrono::milliseconds(200)), 0);
    }

    void wrongServerKeyFails()
    {
        zmq::context_t context;
        auto zap = ZapAuthenticator::start(context);
        QVERIFY(zap.ok());
        const CurveKeyPair server = freshKeys();
        EchoServer echo(context, server);
        const CurveKeyPair impostor = freshKeys();
        auto client = Client::connect(context, {echo.endpoint, impostor.publicKey, freshKeys()});
        QVERIFY(client.ok());
        auto reply = (*client)->request<MyStatsReply>(MyStatsRequest{"tiny"}, 500);
        QVERIFY(!reply.ok());
        QCOMPARE(reply.error().code, std::string("timeout"));
        QCOMPARE(echo.received.load(), 0);
    }

    void clientRecoversAfterTimeout()
    {
        zmq::context_t context;
        auto zap = ZapAuthenticator::start(context);
        QVERIFY(zap.ok());
        const CurveKeyPair server = freshKeys();
        EchoServer echo(context, server, /*ignoreFirst=*/1);
        auto client = Client::connect(context, {echo.endpoint, server.publicKey, freshKeys()});
        QVERIFY(client.ok());
        auto lost = (*client)->request<MyStatsReply>(MyStatsRequest{"tiny"}, 300);
        QCOMPARE(lost.error().code, std::string("timeout"));
        auto reply = (*client)->request<MyStatsReply>(MyStatsRequest{"tiny"}, 5000);
        if (!reply)
            QFAIL(reply.error().message.c_str());
        QCOMPARE(echo.received.load(), 2);
    }

    void oversizedFrameIsDropped()
    {
        zmq::context_t context;
        auto zap = ZapAuthenticator::start(context);
        QVERIFY(zap.ok());
        const CurveKeyPair server = freshKeys();
        EchoServer echo(context, server);
        const CurveKeyPair volunteer = freshKeys();
        auto big = makeCurveClientSocket(context, zmq::socket_type::dealer, server.publicKey, volunteer, echo.endpoint);
        QVERIFY(big.ok());
        // The server's ZMQ_MAXMSGSIZE drops the connection as the frame's
        // size comes in: wait for that, rather than for a while.
        struct DisconnectWatch : zmq::monitor_t {
            bool disconnected = false;
            void on_event_disconnected(const zmq_event_t&, const char*) override { disconnected = true; }
        } watch;
        watch.init(*big, "inproc://oversized-frame-monitor", ZMQ_EVENT_DISCONNECTED);
        big->send(zmq::buffer(std::string(kMaxRequestBytes + 1, 'x')), zmq::send_flags::dontwait);
        QVERIFY2(waitFor(
                     [&] {
                         watch.check_event(50);
                         return watch.disconnected;
                     },
                     20000),
            "the server did not drop the connection that sent an oversized frame");
        QCOMPARE(echo.received.load(), 0);
        // The server still serves others.
        auto client = Client::connect(context, {echo.endpoint, server.publicKey, freshKeys()});
        QVERIFY(client.ok());
        QVERIFY((*client)->request<MyStatsReply>(MyStatsRequest{"tiny"}, 5000).ok());
    }

    void backoff()
    {
        QCOMPARE(nextBackoffMs(0), kReconnectInitialMs);
        QCOMPARE(nextBackoffMs(kReconnectInitialMs), 2 * kReconnectInitialMs);
        QCOMPARE(nextBackoffMs(kReconnectMaxMs), kReconnectMaxMs);
        QVERIFY(kHeartbeatLiveness == 3);
    }
};

QTEST_GUILESS_MAIN(TestTransport)
#include "tst_transport.moc"
