#include "net/core_link/core_channel.h"

#include "net/wire/error_codes.h"
#include "net/wire/unpack.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace crowdtrain::corelink {
namespace {

using Clock = std::chrono::steady_clock;

uint32_t readBigEndian(const char* p)
{
    const auto* b = reinterpret_cast<const unsigned char*>(p);
    return uint32_t(b[0]) << 24 | uint32_t(b[1]) << 16 | uint32_t(b[2]) << 8 | uint32_t(b[3]);
}

} // namespace

CoreChannel::~CoreChannel()
{
    close();
}

CoreChannel::CoreChannel(CoreChannel&& other) noexcept
    : m_fd(std::exchange(other.m_fd, -1))
    , m_buffer(std::move(other.m_buffer))
{ }

CoreChannel& CoreChannel::operator=(CoreChannel&& other) noexcept
{
    if (this != &other) {
        close();
        m_fd = std::exchange(other.m_fd, -1);
        m_buffer = std::move(other.m_buffer);
    }
    return *this;
}

void CoreChannel::close()
{
    if (m_fd >= 0)
        ::close(m_fd);
    m_fd = -1;
    m_buffer.clear();
}

Status CoreChannel::fail(Error error)
{
    close();
    return error;
}

net::MapWriter message(std::string_view type)
{
    net::MapWriter w;
    w.str("type", type);
    return w;
}

Status CoreChannel::send(const net::MapWriter& message)
{
    if (m_fd < 0)
        return Error::make(kClosed, "the training core's channel is closed");
    const std::string body = message.bytes();
    if (body.size() > kMaxCoreFrameBytes)
        return Error::make(net::errc::kTooLarge, "a frame of " + std::to_string(body.size()) + " bytes for the core");
    const uint32_t n = uint32_t(body.size());
    const char length[4] = {char(n >> 24), char(n >> 16), char(n >> 8), char(n)};
    std::string frame(length, 4);
    frame += body;
    std::size_t sent = 0;
    while (sent < frame.size()) {
        const ssize_t w = ::send(m_fd, frame.data() + sent, frame.size() - sent, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return fail(Error::make(kClosed, std::string("the training core's channel: ") + std::strerror(errno)));
        sent += std::size_t(w);
    }
    return Status::success();
}

// Reads until m_buffer holds `want` bytes; false on timeout.
Result<bool> CoreChannel::fill(std::size_t want, int timeoutMs)
{
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeoutMs < 0 ? 0 : timeoutMs);
    char chunk[65536];
    while (m_buffer.size() < want) {
        int wait = -1;
        if (timeoutMs >= 0) {
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
            if (left <= 0)
                return false;
            wait = int(left);
        }
        pollfd p{m_fd, POLLIN, 0};
        const int ready = ::poll(&p, 1, wait);
        if (ready < 0 && errno == EINTR)
            continue;
        if (ready < 0)
            return fail(Error::make(net::errc::kIoError, std::string("poll: ") + std::strerror(errno))).error();
        if (ready == 0)
            return false;
        const ssize_t r = ::recv(m_fd, chunk, sizeof chunk, 0);
        if (r < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (r <= 0)
            return fail(Error::make(kClosed, "the other end of the training core's channel closed it")).error();
        m_buffer.append(chunk, std::size_t(r));
    }
    return true;
}

Result<Frame> CoreChannel::receive(int timeoutMs)
{
    if (m_fd < 0)
        return Error::make(kClosed, "the training core's channel is closed");
    const auto start = Clock::now();
    auto left = [&] {
        if (timeoutMs < 0)
            return -1;
        const auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
        return int(std::max<int64_t>(0, timeoutMs - spent));
    };
    auto header = fill(4, left());
    if (!header)
        return header.error();
    if (!*header)
        return Error::make(
            net::errc::kTimeout, "no frame from the training core within " + std::to_string(timeoutMs) + " ms");
    const uint32_t n = readBigEndian(m_buffer.data());
    if (n == 0 || n > kMaxCoreFrameBytes)
        return fail(Error::make(net::errc::kMalformed, "a frame length of " + std::to_string(n) + " bytes")).error();
    auto body = fill(4 + std::size_t(n), left());
    if (!body)
        return body.error();
    if (!*body)
        return Error::make(net::errc::kTimeout, "a frame from the training core stopped half way");
    net::UnpackLimits limits;
    limits.maxBytes = kMaxCoreFrameBytes;
    limits.maxBinary = 0;
    limits.maxArray = 4096;
    limits.maxMap = 64;
    auto handle = net::unpackUntrusted(m_buffer.data() + 4, n, limits);
    m_buffer.erase(0, 4 + std::size_t(n));
    if (!handle)
        return fail(Error::make(net::errc::kMalformed, "a frame that is not msgpack: " + handle.error().message))
            .error();
    net::DecodeContext context;
    net::MapView view(context, &handle->get(), "");
    std::string type = view.str("type", {64});
    if (context.failed())
        return fail(Error::make(net::errc::kMalformed, "a frame without a type: " + context.error().message)).error();
    return Frame{std::move(type), std::move(*handle)};
}

} // namespace crowdtrain::corelink
