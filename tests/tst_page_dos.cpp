// The public page (net/page) stays up for everyone while one address
// attacks it, against a real PageServer on 127.0.0.1: the attacker connects
// from 127.0.0.2 (all of 127/8 is loopback), the honest probe from
// 127.0.0.1. Slowly trickled headers ("slowloris") and idle connections
// hold no serving thread and at most a few connections per address; header
// blocks past the count or the size are refused; and the probe is answered
// throughout. Every wait is bounded by the attack's own rounds.
#include "net/page/page_server.h"

#include <QTemporaryDir>
#include <QTest>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <vector>

using namespace crowdtrain;

namespace {

constexpr const char* kAttacker = "127.0.0.2";
constexpr const char* kHonest = "127.0.0.1";
constexpr const char* kProbe = "GET /api/projects HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
constexpr int kRounds = 40; // of the attack; one round is a trickled line and a wait of up to kRoundMs
constexpr int kRoundMs = 250;

// A connected socket from `source` (or -1).
int connectFrom(const char* source, uint16_t port)
{
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in from{};
    from.sin_family = AF_INET;
    ::inet_pton(AF_INET, source, &from.sin_addr);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(port);
    ::inet_pton(AF_INET, kHonest, &to.sin_addr);
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0
        || ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
        if (fd >= 0)
            ::close(fd);
        return -1;
    }
    return fd;
}

void sendAll(int fd, std::string_view bytes)
{
    while (!bytes.empty()) {
        const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
        if (n <= 0)
            return; // refused and closed: what the reply will say
        bytes.remove_prefix(std::size_t(n));
    }
}

// Reads what has come within `waitMs`; true once the peer closed.
bool readFor(int fd, std::string& into, int waitMs)
{
    pollfd p{fd, POLLIN, 0};
    while (::poll(&p, 1, waitMs) > 0) {
        char buffer[4096];
        const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
        if (n <= 0)
            return true;
        into.append(buffer, std::size_t(n));
        waitMs = 0;
    }
    return false;
}

std::string statusOf(const std::string& reply)
{
    return reply.substr(0, reply.find('\r'));
}

struct Attack {
    std::vector<int> fds;
    ~Attack()
    {
        for (int fd : fds)
            ::close(fd);
    }
    // Opens `count` connections from the attacker, each with a request line
    // when `slow`; those the server refuses at once count too.
    void open(uint16_t port, int count, bool slow)
    {
        for (int i = 0; i < count; ++i) {
            const int fd = connectFrom(kAttacker, port);
            if (fd < 0)
                qFatal("cannot connect from %s", kAttacker);
            if (slow)
                sendAll(fd, "GET / HTTP/1.1\r\n");
            fds.push_back(fd);
        }
    }
    void trickle(int line)
    {
        const std::string text = "X-Slow-" + std::to_string(line) + ": a\r\n";
        for (int fd : fds)
            ::send(fd, text.data(), text.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
};

} // namespace

class TestPageDos : public QObject {
    Q_OBJECT

    QTemporaryDir m_dir;
    std::shared_ptr<page::PageFeed> m_feed;

    std::unique_ptr<page::PageServer> startServer(page::PageOptions options = {})
    {
        options.address = {kHonest, 0};
        auto server = page::PageServer::start(options, m_feed);
        if (!server)
            qFatal("page: %s", server.error().message.c_str());
        return std::move(*server);
    }

    // The probe, sent from the honest address while `attack` trickles on.
    static std::string probeDuring(uint16_t port, Attack& attack)
    {
        const int fd = connectFrom(kHonest, port);
        if (fd < 0)
            qFatal("cannot connect from %s", kHonest);
        sendAll(fd, kProbe);
        std::string reply;
        for (int round = 0; round < kRounds; ++round) {
            attack.trickle(round);
            if (readFor(fd, reply, kRoundMs))
                break;
        }
        ::close(fd);
        return reply;
    }

private slots:
    void initTestCase()
    {
        QVERIFY(m_dir.isValid());
        m_feed = std::make_shared<page::PageFeed>(m_dir.path().toStdString());
        // Both addresses are this machine's.
        const int fd = connectFrom(kAttacker, startServer()->port());
        QVERIFY2(fd >= 0, "127.0.0.2 is not usable here");
        ::close(fd);
    }

    // 64 trickling and 200 silent connections from one address, against the
    // default eight threads.
    void anHonestProbeIsServedThroughASlowloris()
    {
        auto server = startServer();
        Attack attack;
        attack.open(server->port(), 64, true);
        attack.open(server->port(), 200, false);
        const std::string reply = probeDuring(server->port(), attack);
        QCOMPARE(statusOf(reply), std::string("HTTP/1.1 200 OK"));
        QVERIFY(reply.find("\r\n\r\n[") != std::string::npos); // the project list (a JSON array)
    }

    // With no per-address limit to speak of and one thread: the waiting
    // sockets still hold no thread, so the probe is answered.
    void idleSocketsHoldNoThread()
    {
        page::PageOptions options;
        options.threads = 1;
        options.front.connectionsPerAddress = 10000;
        auto server = startServer(options);
        Attack attack;
        attack.open(server->port(), 100, true);
        attack.open(server->port(), 100, false);
        QCOMPARE(statusOf(probeDuring(server->port(), attack)), std::string("HTTP/1.1 200 OK"));
    }

    // One address holds connectionsPerAddress at once; the next is told so.
    void oneAddressHoldsAFewConnections()
    {
        page::PageOptions options;
        options.front.connectionsPerAddress = 4;
        options.front.headerDeadlineMs = 600000; // the four stay for as long as the test runs
        auto server = startServer(options);
        Attack attack;
        attack.open(server->port(), 4, false);
        const int extra = connectFrom(kAttacker, server->port());
        QVERIFY(extra >= 0);
        std::string refused;
        for (int round = 0; round < kRounds && !readFor(extra, refused, kRoundMs); ++round)
            attack.trickle(round);
        ::close(extra);
        QCOMPARE(statusOf(refused), std::string("HTTP/1.1 429 Too Many Requests"));
        QVERIFY(refused.find("Retry-After: 1") != std::string::npos);
    }

    // A header block past the line count or the size is refused; the page
    // answers the next request as before.
    void hugeHeadersAreRefused()
    {
        auto server = startServer();
        std::string manyLines = "GET / HTTP/1.1\r\nHost: a\r\n";
        for (int i = 0; i < 200; ++i)
            manyLines += "X-Line-" + std::to_string(i) + ": a\r\n";
        std::string bigBlock = "GET / HTTP/1.1\r\nHost: a\r\n";
        for (int i = 0; i < 16; ++i)
            bigBlock += "X-Big-" + std::to_string(i) + ": " + std::string(4000, 'a') + "\r\n";
        for (const std::string& request : {manyLines, bigBlock}) {
            const int fd = connectFrom(kHonest, server->port());
            QVERIFY(fd >= 0);
            sendAll(fd, request + "\r\n");
            std::string reply;
            for (int round = 0; round < kRounds && !readFor(fd, reply, kRoundMs); ++round) { }
            ::close(fd);
            QCOMPARE(statusOf(reply), std::string("HTTP/1.1 431 Request Header Fields Too Large"));
        }
        Attack none;
        QCOMPARE(statusOf(probeDuring(server->port(), none)), std::string("HTTP/1.1 200 OK"));
    }

    // A header that never ends is answered 408 at its deadline.
    void aHeaderHasADeadline()
    {
        page::PageOptions options;
        options.front.headerDeadlineMs = 200;
        auto server = startServer(options);
        Attack attack;
        attack.open(server->port(), 1, true);
        std::string reply;
        for (int round = 0; round < kRounds && !readFor(attack.fds[0], reply, kRoundMs); ++round)
            attack.trickle(round);
        QCOMPARE(statusOf(reply), std::string("HTTP/1.1 408 Request Timeout"));
    }
};

QTEST_GUILESS_MAIN(TestPageDos)
#include "tst_page_dos.moc"
