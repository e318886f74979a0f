// A user-space stand-in for netem (this kernel has no sch_netem): a TCP
// forwarder that adds one-way delay, jitter and the effect of packet loss to
// each direction of a connection, and a probe that measures what a link
// delivers. docs/homelink.md describes the model and its limits.
//
//   link_relay relay --forward LPORT:HOST:PORT [--forward ...] [--listen-host 127.0.0.1]
//                    [--delay-ms D] [--jitter-ms J] [--loss P] [--loss-unit-bytes U]
//                    [--stall-ms S] [--seed N] [--queue-bytes B]
//   link_relay serve --listen HOST:PORT        (answers a probe)
//   link_relay probe --connect HOST:PORT [--pings N] [--down-bytes N] [--up-bytes N]
//
// relay: every connection to LPORT is forwarded to HOST:PORT. Each chunk read
// from one side is written to the other no earlier than D + U(-J, J) ms after
// it was read and never before the chunk ahead of it (TCP delivers in order).
// For loss, each U-byte unit of a chunk (default 1448, a TCP segment's
// payload on a 1500-byte MTU) is lost with probability P; a loss
// holds that chunk and everything behind it for S more ms (default 2 D, one
// round trip: the time a fast retransmission takes to fill the hole), and
// the reader stops reading for S ms, which (with its small receive buffer)
// holds the sender back: each loss costs the link S ms of sending.
// It prints "ready" on stdout once it listens.
//
// probe: N pings ("ping\n" -> "pong\n"), then a download of --down-bytes and
// an upload of --up-bytes; prints one JSON line with the round trips in ms and
// the rates in Mbit/s of payload (the round trip of the command is taken off).

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kReadBytes = 16384;

[[noreturn]] void die(const std::string& why)
{
    std::fprintf(stderr, "link_relay: %s\n", why.c_str());
    std::exit(2);
}

struct Address {
    std::string host;
    uint16_t port = 0;
};

Address parseAddress(const std::string& text)
{
    const auto colon = text.rfind(':');
    if (colon == std::string::npos)
        die("expected HOST:PORT, got '" + text + "'");
    return {text.substr(0, colon), uint16_t(std::stoi(text.substr(colon + 1)))};
}

sockaddr_in toSockaddr(const Address& a)
{
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(a.port);
    if (inet_pton(AF_INET, a.host.c_str(), &sa.sin_addr) != 1)
        die("not an IPv4 address: " + a.host);
    return sa;
}

// The relay reads with a small receive buffer, so that a reader that stops
// (a loss) holds the sender back within a few KiB, as a real loss does.
void smallReceiveBuffer(int fd)
{
    const int bytes = 8192;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
}

int listenOn(const Address& a, bool smallBuffer)
{
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (smallBuffer)
        smallReceiveBuffer(fd); // accepted sockets inherit it
    const sockaddr_in sa = toSockaddr(a);
    if (bind(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0 || listen(fd, 64) != 0)
        die("cannot listen on " + a.host + ":" + std::to_string(a.port) + ": " + std::strerror(errno));
    return fd;
}

int connectTo(const Address& a, bool smallBuffer)
{
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (smallBuffer)
        smallReceiveBuffer(fd);
    const sockaddr_in sa = toSockaddr(a);
    if (connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0) {
        close(fd);
        return -1;
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

bool writeAll(int fd, const char* data, std::size_t size)
{
    while (size > 0) {
        const ssize_t n = send(fd, data, size, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        data += n;
        size -= std::size_t(n);
    }
    return true;
}

struct Impairment {
    double delayMs = 0;
    double jitterMs = 0;
    double loss = 0;
    double stallMs = -1; // < 0: 2 * delayMs
    double lossUnitBytes = 1448; // a TCP segment's payload on a 1500-byte MTU
    std::size_t queueBytes = 8u << 20;
    uint64_t seed = 1;
};

// One direction of a forwarded connection: the reader stamps each chunk with
// its release time, the writer sends it then.
class Pipe {
public:
    Pipe(int from, int to, const Impairment& impairment, uint64_t seed)
        : m_from(from)
        , m_to(to)
        , m_imp(impairment)
        , m_rng(seed)
    { }

    void readLoop()
    {
        std::vector<char> buffer(kReadBytes);
        while (true) {
            const ssize_t n = recv(m_from, buffer.data(), buffer.size(), 0);
            if (n < 0 && errno == EINTR)
                continue;
            std::unique_lock lock(m_mutex);
            if (n <= 0) {
                m_eof = true;
                m_changed.notify_all();
                return;
            }
            m_changed.wait(lock, [&] { return m_queued < m_imp.queueBytes || m_broken; });
            if (m_broken)
                return;
            double stallMs = 0;
            const Clock::time_point release = releaseTime(std::size_t(n), stallMs);
            m_queue.push_back({release, std::string(buffer.data(), std::size_t(n))});
            m_queued += std::size_t(n);
            m_changed.notify_all();
            if (stallMs > 0) {
                // A loss also holds the sender back: while nobody reads, the
                // small receive buffer fills and its TCP stops sending.
                lock.unlock();
                std::this_thread::sleep_for(std::chrono::microseconds(int64_t(stallMs * 1000)));
            }
        }
    }

    // Returns false when the far side failed (the whole connection ends).
    bool writeLoop()
    {
        while (true) {
            std::unique_lock lock(m_mutex);
            m_changed.wait(lock, [&] { return !m_queue.empty() || m_eof || m_broken; });
            if (m_broken)
                return false;
            if (m_queue.empty()) { // eof and drained
                shutdown(m_to, SHUT_WR);
                return true;
            }
            const Clock::time_point release = m_queue.front().release;
            if (Clock::now() < release) {
                m_changed.wait_until(lock, release);
                continue;
            }
            std::string data = std::move(m_queue.front().data);
            m_queue.pop_front();
            m_queued -= data.size();
            m_changed.notify_all();
            lock.unlock();
            if (!writeAll(m_to, data.data(), data.size())) {
                breakPipe();
                return false;
            }
        }
    }

    void breakPipe()
    {
        std::lock_guard lock(m_mutex);
        m_broken = true;
        m_changed.notify_all();
    }

private:
    // When the chunk just read may be written; `stallMs` gets the pause its
    // lost segments cost (0 when none was lost).
    Clock::time_point releaseTime(std::size_t bytes, double& stallMs)
    {
        double ms = m_imp.delayMs;
        if (m_imp.jitterMs > 0)
            ms += std::uniform_real_distribution<double>(-m_imp.jitterMs, m_imp.jitterMs)(m_rng);
        if (m_imp.loss > 0) {
            // Losses among the chunk's units: Poisson, as for many units each
            // lost with a small probability (the unit may be a fraction of a
            // byte on a scaled link).
            const double stall = m_imp.stallMs >= 0 ? m_imp.stallMs : 2 * m_imp.delayMs;
            std::poisson_distribution<int> losses(double(bytes) / m_imp.lossUnitBytes * m_imp.loss);
            stallMs = stall * losses(m_rng);
        }
        ms += stallMs;
        const auto at = Clock::now() + std::chrono::microseconds(int64_t(std::max(0.0, ms) * 1000));
        // In order: a chunk never overtakes the one ahead of it.
        m_lastRelease = std::max(m_lastRelease, at);
        return m_lastRelease;
    }

    struct Chunk {
        Clock::time_point release;
        std::string data;
    };
    int m_from;
    int m_to;
    Impairment m_imp;
    std::mt19937_64 m_rng;
    std::mutex m_mutex;
    std::condition_variable m_changed;
    std::deque<Chunk> m_queue;
    std::size_t m_queued = 0;
    bool m_eof = false;
    bool m_broken = false;
    Clock::time_point m_lastRelease{};
};

// Both directions of one forwarded connection; the sockets close when the
// last of its four threads is done with it.
struct Connection {
    Connection(int client, int upstream, const Impairment& imp, uint64_t seed)
        : client(client)
        , upstream(upstream)
        , up(client, upstream, imp, seed)
        , down(upstream, client, imp, seed ^ 0x9E3779B97F4A7C15ull)
    { }
    ~Connection()
    {
        close(client);
        close(upstream);
    }
    void fail()
    {
        up.breakPipe();
        down.breakPipe();
        shutdown(client, SHUT_RDWR);
        shutdown(upstream, SHUT_RDWR);
    }
    int client;
    int upstream;
    Pipe up;
    Pipe down;
};

void forward(int client, const Address& target, const Impairment& imp, uint64_t seed)
{
    const int upstream = connectTo(target, true);
    if (upstream < 0) {
        close(client);
        return;
    }
    const int one = 1;
    setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    auto c = std::make_shared<Connection>(client, upstream, imp, seed);
    std::thread([c] { c->up.readLoop(); }).detach();
    std::thread([c] { c->down.readLoop(); }).detach();
    std::thread([c] {
        if (!c->up.writeLoop())
            c->fail();
    }).detach();
    std::thread([c] {
        if (!c->down.writeLoop())
            c->fail();
    }).detach();
}

int runRelay(
    const std::vector<std::pair<uint16_t, Address>>& forwards, const std::string& listenHost, const Impairment& imp)
{
    if (forwards.empty())
        die("relay needs at least one --forward LPORT:HOST:PORT");
    std::vector<std::thread> acceptors;
    std::vector<int> listeners;
    for (const auto& [port, target] : forwards)
        listeners.push_back(listenOn({listenHost, port}, true));
    std::printf("ready\n");
    std::fflush(stdout);
    for (std::size_t i = 0; i < forwards.size(); ++i) {
        acceptors.emplace_back([fd = listeners[i], target = forwards[i].second, imp, i] {
            uint64_t count = 0;
            while (true) {
                const int client = accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
                if (client < 0)
                    continue;
                forward(client, target, imp, imp.seed + 1000003 * i + 7919 * count++);
            }
        });
    }
    for (auto& t : acceptors)
        t.join();
    return 0;
}

bool readLine(int fd, std::string& line)
{
    line.clear();
    char c;
    while (true) {
        const ssize_t n = recv(fd, &c, 1, 0);
        if (n <= 0)
            return false;
        if (c == '\n')
            return true;
        line += c;
    }
}

bool drain(int fd, uint64_t bytes)
{
    std::vector<char> buffer(65536);
    while (bytes > 0) {
        const ssize_t n = recv(fd, buffer.data(), std::min<uint64_t>(bytes, buffer.size()), 0);
        if (n <= 0)
            return false;
        bytes -= uint64_t(n);
    }
    return true;
}

void serveOne(int fd)
{
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    std::string line;
    const std::vector<char> zeros(65536, 'x');
    while (readLine(fd, line)) {
        if (line == "ping") {
            if (!writeAll(fd, "pong\n", 5))
                break;
        } else if (line.rfind("down ", 0) == 0) {
            uint64_t left = std::stoull(line.substr(5));
            while (left > 0) {
                const std::size_t n = std::size_t(std::min<uint64_t>(left, zeros.size()));
                if (!writeAll(fd, zeros.data(), n))
                    break;
                left -= n;
            }
        } else if (line.rfind("up ", 0) == 0) {
            if (!drain(fd, std::stoull(line.substr(3))) || !writeAll(fd, "done\n", 5))
                break;
        } else {
            break;
        }
    }
    close(fd);
}

int runServe(const Address& at)
{
    const int fd = listenOn(at, false);
    std::printf("ready\n");
    std::fflush(stdout);
    while (true) {
        const int client = accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
        if (client >= 0)
            std::thread(serveOne, client).detach();
    }
}

double msSince(Clock::time_point t)
{
    return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

int runProbe(const Address& at, int pings, uint64_t downBytes, uint64_t upBytes)
{
    int fd = -1;
    for (int attempt = 0; attempt < 50 && fd < 0; ++attempt) {
        fd = connectTo(at, false);
        if (fd < 0)
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (fd < 0)
        die("cannot connect to " + at.host + ":" + std::to_string(at.port));
    std::vector<double> rtts;
    std::string line;
    for (int i = 0; i < pings; ++i) {
        const auto t = Clock::now();
        if (!writeAll(fd, "ping\n", 5) || !readLine(fd, line) || line != "pong")
            die("the ping failed");
        rtts.push_back(msSince(t));
    }
    std::sort(rtts.begin(), rtts.end());
    const double rttMin = rtts.empty() ? 0 : rtts.front();
    const double rttMedian = rtts.empty() ? 0 : rtts[rtts.size() / 2];
    const double rttMax = rtts.empty() ? 0 : rtts.back();
    double rttMean = 0;
    for (double r : rtts)
        rttMean += r / double(rtts.size());
    auto mbit = [&](uint64_t bytes, double ms) { return double(bytes) * 8 / 1e3 / std::max(1e-3, ms - rttMin); };
    double down = 0;
    if (downBytes > 0) {
        const std::string command = "down " + std::to_string(downBytes) + "\n";
        const auto t = Clock::now();
        if (!writeAll(fd, command.data(), command.size()) || !drain(fd, downBytes))
            die("the download failed");
        down = mbit(downBytes, msSince(t));
    }
    double up = 0;
    if (upBytes > 0) {
        const std::string command = "up " + std::to_string(upBytes) + "\n";
        const std::vector<char> zeros(65536, 'y');
        const auto t = Clock::now();
        bool ok = writeAll(fd, command.data(), command.size());
        for (uint64_t left = upBytes; ok && left > 0;) {
            const std::size_t n = std::size_t(std::min<uint64_t>(left, zeros.size()));
            ok = writeAll(fd, zeros.data(), n);
            left -= n;
        }
        if (!ok || !readLine(fd, line) || line != "done")
            die("the upload failed");
        up = mbit(upBytes, msSince(t));
    }
    close(fd);
    std::printf("{\"rtt_ms_min\": %.2f, \"rtt_ms_median\": %.2f, \"rtt_ms_mean\": %.2f, \"rtt_ms_max\": %.2f, "
                "\"down_mbit\": %.3f, \"up_mbit\": %.3f}\n",
        rttMin, rttMedian, rttMean, rttMax, down, up);
    return 0;
}

} // namespace

int main(int argc, char** argv)
{
    if (argc < 2)
        die("usage: link_relay relay|serve|probe [options] (see bench/link_relay.cpp)");
    const std::string mode = argv[1];
    std::vector<std::pair<uint16_t, Address>> forwards;
    std::string listenHost = "127.0.0.1";
    Address at;
    Impairment imp;
    int pings = 10;
    uint64_t downBytes = 0;
    uint64_t upBytes = 0;
    for (int i = 2; i < argc; ++i) {
        const std::string flag = argv[i];
        if (i + 1 >= argc)
            die(flag + " needs a value");
        const std::string value = argv[++i];
        if (flag == "--forward") {
            const auto colon = value.find(':');
            if (colon == std::string::npos)
                die("--forward LPORT:HOST:PORT, got '" + value + "'");
            forwards.emplace_back(uint16_t(std::stoi(value.substr(0, colon))), parseAddress(value.substr(colon + 1)));
        } else if (flag == "--listen-host") {
            listenHost = value;
        } else if (flag == "--listen" || flag == "--connect") {
            at = parseAddress(value);
        } else if (flag == "--delay-ms") {
            imp.delayMs = std::stod(value);
        } else if (flag == "--jitter-ms") {
            imp.jitterMs = std::stod(value);
        } else if (flag == "--loss") {
            imp.loss = std::stod(value);
        } else if (flag == "--stall-ms") {
            imp.stallMs = std::stod(value);
        } else if (flag == "--loss-unit-bytes") {
            imp.lossUnitBytes = std::stod(value);
        } else if (flag == "--queue-bytes") {
            imp.queueBytes = std::stoull(value);
        } else if (flag == "--seed") {
            imp.seed = std::stoull(value);
        } else if (flag == "--pings") {
            pings = std::stoi(value);
        } else if (flag == "--down-bytes") {
            downBytes = std::stoull(value);
        } else if (flag == "--up-bytes") {
            upBytes = std::stoull(value);
        } else {
            die("unknown option " + flag);
        }
    }
    if (imp.delayMs < 0 || imp.jitterMs < 0 || imp.loss < 0 || imp.loss >= 1 || imp.queueBytes == 0
        || !(imp.lossUnitBytes > 0))
        die("delay and jitter must be >= 0, loss in [0, 1), the queue and the loss unit positive");
    if (mode == "relay")
        return runRelay(forwards, listenHost, imp);
    if (mode == "serve")
        return runServe(at);
    if (mode == "probe")
        return runProbe(at, pings, downBytes, upBytes);
    die("unknown mode " + mode);
}
