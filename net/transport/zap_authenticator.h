#pragma once

// The ZAP handler (RFC 27) of a ZeroMQ context. Every server socket with
// CURVE consults it during the handshake: it accepts every CURVE client and
// sets the connection's User-Id to the client's Z85 public key (the
// volunteer's identity, read back with peerPublicKey()); it refuses NULL,
// PLAIN and any other mechanism. Start it before binding server sockets on
// the context. It owns its thread; the destructor stops and joins it (within
// kPollMs). Thread-safe counters.

#include "core/result.h"

#include <atomic>
#include <memory>
#include <thread>
#include <zmq.hpp>

namespace crowdtrain::net {

class ZapAuthenticator {
public:
    // Binds inproc://zeromq.zap.01 on `context` (once per context: a second
    // one fails with "address_in_use") and starts the thread.
    static Result<std::unique_ptr<ZapAuthenticator>> start(zmq::context_t& context);
    ~ZapAuthenticator();
    ZapAuthenticator(const ZapAuthenticator&) = delete;
    ZapAuthenticator& operator=(const ZapAuthenticator&) = delete;

    uint64_t accepted() const { return m_accepted.load(); }
    uint64_t refused() const { return m_refused.load(); }

    static constexpr int kPollMs = 100;

private:
    explicit ZapAuthenticator(zmq::socket_t socket);
    void run();
    void handle(std::vector<zmq::message_t>& request);

    zmq::socket_t m_socket; // used by m_thread only, once started
    std::atomic<bool> m_stop{false};
    std::atomic<uint64_t> m_accepted{0};
    std::atomic<uint64_t> m_refused{0};
    std::thread m_thread;
};

} // namespace crowdtrain::net
