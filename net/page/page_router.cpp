#include "net/page/page_router.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

namespace crowdtrain::page {
namespace {

// The front's bytes for reading; the socket for writing.
class ReadyStream final : public httplib::Stream {
public:
    ReadyStream(const ReadyRequest& request, int writeTimeoutMs)
        : m_request(request)
        , m_writeTimeoutMs(writeTimeoutMs)
    { }

    bool is_readable() const override { return m_read < m_request.bytes.size(); }

    bool is_writable() const override
    {
        pollfd p{m_request.fd, POLLOUT, 0};
        int ready = 0;
        do
            ready = ::poll(&p, 1, m_writeTimeoutMs);
        while (ready < 0 && errno == EINTR);
        return ready > 0 && (p.revents & (POLLERR | POLLHUP | POLLNVAL)) == 0;
    }

    ssize_t read(char* ptr, size_t size) override
    {
        const std::size_t n = std::min(size, m_request.bytes.size() - m_read);
        std::memcpy(ptr, m_request.bytes.data() + m_read, n);
        m_read += n;
        return ssize_t(n);
    }

    ssize_t write(const char* ptr, size_t size) override
    {
        std::size_t sent = 0;
        while (sent < size) {
            const ssize_t n = ::send(m_request.fd, ptr + sent, size - sent, MSG_NOSIGNAL);
            if (n > 0) {
                sent += std::size_t(n);
                continue;
            }
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && is_writable())
                continue;
            return sent > 0 ? ssize_t(sent) : -1;
        }
        return ssize_t(sent);
    }

    void get_remote_ip_and_port(std::string& ip, int& port) const override
    {
        ip = m_request.address;
        port = m_request.port;
    }

    void get_local_ip_and_port(std::string& ip, int& port) const override
    {
        ip.clear();
        port = 0;
    }

    socket_t socket() const override { return m_request.fd; }

private:
    const ReadyRequest& m_request;
    int m_writeTimeoutMs;
    std::size_t m_read = 0;
};

} // namespace

// cpp-httplib streams a content provider (a checkpoint download) only while
// its listening socket is valid; this router listens on nothing (stop() and
// listen() are never called), so it holds a placeholder that is not a
// descriptor.
PageRouter::PageRouter()
{
    svr_sock_ = std::numeric_limits<int>::max();
}

void PageRouter::answer(ReadyRequest request, int writeTimeoutMs)
{
    ReadyStream stream(request, writeTimeoutMs);
    bool closed = false;
    process_request(stream, true, closed, nullptr);
    ::shutdown(request.fd, SHUT_RDWR);
    ::close(request.fd);
}

} // namespace crowdtrain::page
