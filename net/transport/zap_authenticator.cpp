#include "net/transport/zap_authenticator.h"

#include "core/thread_name.h"
#include "net/wire/error_codes.h"

#include <zmq_addon.hpp>

namespace crowdtrain::net {

namespace {

constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";
constexpr std::size_t kCurveKeyBytes = 32;
constexpr std::size_t kMaxZapFrames = 16;

} // namespace

Result<std::unique_ptr<ZapAuthenticator>> ZapAuthenticator::start(zmq::context_t& context)
{
    try {
        zmq::socket_t socket(context, zmq::socket_type::rep);
        socket.set(zmq::sockopt::linger, 0);
        socket.bind(kZapEndpoint);
        return std::unique_ptr<ZapAuthenticator>(new ZapAuthenticator(std::move(socket)));
    } catch (const zmq::error_t& e) {
        if (e.num() == EADDRINUSE)
            return Error::make(errc::kAddressInUse, "this context already has a ZAP handler");
        return Error::make(errc::kZmqError, std::string("cannot start the ZAP handler: ") + e.what());
    }
}

ZapAuthenticator::ZapAuthenticator(zmq::socket_t socket)
    : m_socket(std::move(socket))
    , m_thread([this] {
        core::nameThisThread("zap-auth");
        run();
    })
{ }

ZapAuthenticator::~ZapAuthenticator()
{
    m_stop = true;
    m_thread.join();
}

void ZapAuthenticator::run()
{
    try {
        while (!m_stop) {
            zmq::pollitem_t item{m_socket.handle(), 0, ZMQ_POLLIN, 0};
            if (zmq::poll(&item, 1, std::chrono::milliseconds(kPollMs)) == 0)
                continue;
            std::vector<zmq::message_t> request;
            if (!zmq::recv_multipart(m_socket, std::back_inserter(request), zmq::recv_flags::dontwait))
                continue;
            handle(request);
        }
    } catch (const zmq::error_t&) {
        // The context is shutting down: nothing left to authenticate.
    }
}

void ZapAuthenticator::handle(std::vector<zmq::message_t>& request)
{
    // [version, request id, domain, address, routing id, mechanism, credentials...]
    const bool shaped = request.size() >= 6 && request.size() <= kMaxZapFrames && request[0].to_string_view() == "1.0";
    const std::string requestId = request.size() >= 2 ? request[1].to_string() : std::string();
    const std::string_view mechanism = shaped ? request[5].to_string_view() : std::string_view();
    std::string status = "400";
    std::string text = "only CURVE clients are accepted";
    std::string userId;
    if (mechanism == "CURVE" && request.size() == 7 && request[6].size() == kCurveKeyBytes) {
        char z85[41] = {};
        if (zmq_z85_encode(z85, request[6].data<uint8_t>(), kCurveKeyBytes)) {
            status = "200";
            text = "OK";
            userId = z85;
        }
    }
    (status == "200" ? m_accepted : m_refused)++;
    std::array<zmq::const_buffer, 6> reply = {zmq::str_buffer("1.0"), zmq::buffer(requestId), zmq::buffer(status),
        zmq::buffer(text), zmq::buffer(userId), zmq::const_buffer()};
    zmq::send_multipart(m_socket, reply);
}

} // namespace crowdtrain::net
