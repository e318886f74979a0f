#include "net/page/http_front.h"
#include "core/thread_name.h"

#include "net/wire/error_codes.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <mutex>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

namespace crowdtrain::page {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kAcceptsPerTurn = 256; // then the waiting sockets get their turn
constexpr std::size_t kReadChunk = 4096;
constexpr std::size_t kMaxDrainBytes = 256 * 1024; // read and dropped before a refusal's close
constexpr auto kAcceptPause = std::chrono::milliseconds(100); // out of descriptors

// A short plain-text answer, then the connection closes.
std::string reply(std::string_view status, std::string_view body, std::string_view extra = {})
{
    std::string text = "HTTP/1.1 ";
    text.append(status).append("\r\n").append(extra);
    text += "Content-Type: text/plain; charset=utf-8\r\nX-Content-Type-Options: nosniff\r\nConnection: close\r\n";
    text += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n";
    return text.append(body);
}

const std::string kTooMany
    = reply("429 Too Many Requests", "Too many connections from your address.\n", "Retry-After: 1\r\n");
const std::string kTimeout = reply("408 Request Timeout", "The request's header came too slowly.\n");
const std::string kTooLarge = reply("431 Request Header Fields Too Large", "The request's header is too large.\n");

// Best effort: the socket is non-blocking and about to close.
void refuse(int fd, std::string_view reply)
{
    char scratch[kReadChunk];
    for (std::size_t drained = 0; drained < kMaxDrainBytes;) {
        const ssize_t n = ::recv(fd, scratch, sizeof scratch, MSG_DONTWAIT);
        if (n <= 0)
            break;
        drained += std::size_t(n);
    }
    [[maybe_unused]] const ssize_t sent = ::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    ::shutdown(fd, SHUT_WR);
    ::close(fd);
}

std::pair<std::string, int> peerOf(const sockaddr_storage& addr)
{
    char text[INET6_ADDRSTRLEN] = {};
    if (addr.ss_family == AF_INET) {
        const auto& in = reinterpret_cast<const sockaddr_in&>(addr);
        ::inet_ntop(AF_INET, &in.sin_addr, text, sizeof text);
        return {text, ntohs(in.sin_port)};
    }
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(addr);
    if (IN6_IS_ADDR_V4MAPPED(&in6.sin6_addr)) // one address, however it arrives
        ::inet_ntop(AF_INET, &in6.sin6_addr.s6_addr[12], text, sizeof text);
    else
        ::inet_ntop(AF_INET6, &in6.sin6_addr, text, sizeof text);
    return {text, ntohs(in6.sin6_port)};
}

} // namespace

struct HttpFront::Impl {
    struct Waiting {
        int fd = -1;
        std::string address;
        int port = 0;
        std::string bytes;
        Clock::time_point deadline;
        bool done = false;
    };

    FrontLimits limits;
    Handler handler;
    int listenFd = -1;
    int wakeFd = -1;
    uint16_t port = 0;
    std::atomic<bool> stopping{false};
    std::thread thread;

    std::mutex mutex; // the counts, shared with the threads that answer
    std::unordered_map<std::string, int> perAddress;
    int open = 0;

    std::vector<Waiting> waiting; // the front's thread only
    Clock::time_point acceptPausedUntil;

    ~Impl()
    {
        for (const Waiting& w : waiting)
            ::close(w.fd);
        if (listenFd >= 0)
            ::close(listenFd);
        if (wakeFd >= 0)
            ::close(wakeFd);
    }

    bool admit(const std::string& address)
    {
        std::lock_guard lock(mutex);
        int& count = perAddress[address];
        if (count >= limits.connectionsPerAddress)
            return false;
        ++count;
        ++open;
        return true;
    }

    void release(const std::string& address)
    {
        std::lock_guard lock(mutex);
        auto it = perAddress.find(address);
        if (it != perAddress.end() && --it->second <= 0)
            perAddress.erase(it);
        --open;
    }

    int openCount()
    {
        std::lock_guard lock(mutex);
        return open;
    }

    void close(Waiting& w, std::string_view reply)
    {
        if (reply.empty())
            ::close(w.fd);
        else
            refuse(w.fd, reply);
        release(w.address);
        w.done = true;
    }

    // Room for one more: the oldest connection still waiting makes it.
    bool makeRoom()
    {
        if (openCount() < limits.maxConnections)
            return true;
        auto oldest = std::min_element(waiting.begin(), waiting.end(), [](const Waiting& a, const Waiting& b) {
            return (a.done ? Clock::time_point::max() : a.deadline) < (b.done ? Clock::time_point::max() : b.deadline);
        });
        if (oldest == waiting.end() || oldest->done)
            return false;
        close(*oldest, kTimeout);
        return true;
    }

    void acceptSome(Clock::time_point now)
    {
        for (int i = 0; i < kAcceptsPerTurn; ++i) {
            sockaddr_storage addr{};
            socklen_t length = sizeof addr;
            const int fd
                = ::accept4(listenFd, reinterpret_cast<sockaddr*>(&addr), &length, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd < 0) {
                if (errno == EINTR || errno == ECONNABORTED)
                    continue;
                if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                    acceptPausedUntil = now + kAcceptPause;
                return;
            }
            auto [address, peerPort] = peerOf(addr);
            if (!makeRoom()) {
                ::close(fd);
                continue;
            }
            if (!admit(address)) {
                refuse(fd, kTooMany);
                continue;
            }
            waiting.push_back(Waiting{
                fd, std::move(address), peerPort, {}, now + std::chrono::milliseconds(limits.headerDeadlineMs)});
        }
    }

    // Whatever has arrived; hands the request on once its header block has.
    void readSome(Waiting& w)
    {
        char chunk[kReadChunk];
        for (;;) {
            const std::size_t room = limits.maxHeaderBytes + 1 - std::min(w.bytes.size(), limits.maxHeaderBytes);
            const ssize_t n = ::recv(w.fd, chunk, std::min(room, sizeof chunk), 0);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                return;
            if (n <= 0)
                return close(w, {});
            const std::size_t from = w.bytes.size() < 3 ? 0 : w.bytes.size() - 3;
            w.bytes.append(chunk, std::size_t(n));
            const std::size_t end = w.bytes.find("\r\n\r\n", from);
            const std::size_t headerBytes = end == std::string::npos ? w.bytes.size() : end + 4;
            const auto lines = std::count(w.bytes.begin(), w.bytes.begin() + std::ptrdiff_t(headerBytes), '\n');
            if (headerBytes > limits.maxHeaderBytes || lines > limits.maxHeaderLines)
                return close(w, kTooLarge);
            if (end != std::string::npos) {
                w.done = true;
                handler(ReadyRequest{w.fd, std::move(w.bytes), w.address, w.port});
                return;
            }
        }
    }

    void loop()
    {
        std::vector<pollfd> fds;
        while (!stopping.load()) {
            const Clock::time_point now = Clock::now();
            const bool accepting = now >= acceptPausedUntil;
            fds.assign({pollfd{wakeFd, POLLIN, 0}, pollfd{accepting ? listenFd : -1, POLLIN, 0}});
            Clock::time_point next = accepting ? Clock::time_point::max() : acceptPausedUntil;
            for (const Waiting& w : waiting) {
                fds.push_back(pollfd{w.fd, POLLIN, 0});
                next = std::min(next, w.deadline);
            }
            const int timeoutMs = next == Clock::time_point::max()
                ? -1
                : int(std::clamp<int64_t>(std::chrono::ceil<std::chrono::milliseconds>(next - now).count(), 0, 60000));
            if (::poll(fds.data(), fds.size(), timeoutMs) < 0 && errno != EINTR)
                return;
            if (fds[0].revents != 0)
                return; // stopping
            const std::size_t before = waiting.size();
            for (std::size_t i = 0; i < before; ++i)
                if (!waiting[i].done && fds[i + 2].revents != 0)
                    readSome(waiting[i]);
            const Clock::time_point after = Clock::now();
            for (Waiting& w : waiting)
                if (!w.done && after >= w.deadline)
                    close(w, kTimeout);
            std::erase_if(waiting, [](const Waiting& w) { return w.done; });
            if (fds[1].revents != 0)
                acceptSome(after);
        }
    }

    Status bind(const std::string& host, uint16_t wanted)
    {
        addrinfo hints{};
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        hints.ai_flags = AI_PASSIVE;
        addrinfo* found = nullptr;
        const std::string service = std::to_string(wanted);
        if (::getaddrinfo(host.c_str(), service.c_str(), &hints, &found) != 0 || !found)
            return Error::make(net::errc::kBadOptions, "--http: " + host + " is not an address here");
        std::unique_ptr<addrinfo, void (*)(addrinfo*)> owned(found, ::freeaddrinfo);
        for (const addrinfo* a = found; a; a = a->ai_next) {
            const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
            if (fd < 0)
                continue;
            const int yes = 1;
            const int no = 0;
            ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
            if (a->ai_family == AF_INET6)
                ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &no, sizeof no);
            if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0) {
                sockaddr_storage bound{};
                socklen_t length = sizeof bound;
                ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length);
                listenFd = fd;
                port = uint16_t(peerOf(bound).second);
                return {};
            }
            ::close(fd);
        }
        return Error::make(net::errc::kBadOptions,
            "--http: cannot listen on " + host + ":" + service + " (in use, or not an address here)");
    }
};

HttpFront::HttpFront(std::unique_ptr<Impl> impl)
    : m_impl(std::move(impl))
{ }

HttpFront::~HttpFront()
{
    stop();
}

void HttpFront::stop()
{
    m_impl->stopping = true;
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t written = ::write(m_impl->wakeFd, &one, sizeof one);
    if (m_impl->thread.joinable())
        m_impl->thread.join();
}

Result<std::unique_ptr<HttpFront>> HttpFront::listen(const std::string& host, uint16_t port, FrontLimits limits)
{
    auto impl = std::make_unique<Impl>();
    impl->limits = limits;
    impl->wakeFd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (impl->wakeFd < 0)
        return Error::make(net::errc::kBadOptions, "--http: no event descriptor for the page's accept loop");
    if (Status bound = impl->bind(host, port); !bound)
        return bound.error();
    return std::unique_ptr<HttpFront>(new HttpFront(std::move(impl)));
}

void HttpFront::start(Handler handler)
{
    Impl& s = *m_impl;
    s.handler = std::move(handler);
    s.thread = std::thread([&s] {
        core::nameThisThread("http-front");
        s.loop();
    });
}

uint16_t HttpFront::port() const
{
    return m_impl->port;
}

void HttpFront::finished(const std::string& address)
{
    m_impl->release(address);
}

} // namespace crowdtrain::page
