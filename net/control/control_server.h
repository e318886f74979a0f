#pragma once

// The daemon's end of the control API (docs/protocol.md section 12): a
// ROUTER socket answering requests and a PUB socket sending events, both
// ipc:// files in the private control folder (control_paths.h).
//
// Threads: run() reads requests on the thread that calls it and calls the
// handler there. A handler answers at once or hands its Responder to
// another thread and answers when its work is done (the zguide's
// asynchronous broker), so replies may leave in another order than their
// requests came; each carries its request's id. At most
// kMaxRequestsInFlight requests wait for an answer at a time; one more is
// answered "busy" at once. stop(), publish() and a Responder may be used
// from any thread, concurrently with run() and with each other. Construct
// and destroy on one thread, after run() has returned.

#include "core/result.h"
#include "net/control/control_envelope.h"
#include "net/control/value.h"

#include <atomic>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string_view>
#include <unordered_map>

namespace zmq {
class context_t;
class socket_t;
} // namespace zmq

namespace crowdtrain::control {

// Answers one request. An Error becomes an ok:false reply with its code and
// message; a nil Value an empty body. Exceptions become "internal".
using Handler = std::function<Result<Value>(const Request&)>;

// The answer to one request, to be given once, from any thread; later
// answers are ignored. When every copy is gone unanswered, the request is
// answered "internal" (so a client never waits on a dropped request). An
// answer after the server is destroyed goes nowhere.
class Responder {
public:
    void operator()(Result<Value> outcome) const;
    struct State; // control_server.cpp

private:
    friend class ControlServer;
    explicit Responder(std::shared_ptr<State> state)
        : m_state(std::move(state))
    { }
    std::shared_ptr<State> m_state;
};

// Called on run()'s thread; answers through `respond`, now or later.
// Exceptions it throws become "internal" replies.
using AsyncHandler = std::function<void(const Request&, Responder respond)>;

class ControlServer {
public:
    // preparePrivateDir(dir), then binds the ROUTER on controlEndpoint(dir)
    // and the PUB on eventsEndpoint(dir), socket files mode 0600. The
    // caller (the daemon) holds the single-instance lock, so a socket file
    // already there is stale and is replaced; as a safety net a socket
    // that still accepts connections is not: "bind_failed". Errors:
    // "insecure_control_dir", "io_error", "bind_failed".
    static Result<std::unique_ptr<ControlServer>> open(const std::filesystem::path& dir, Handler handler);
    static Result<std::unique_ptr<ControlServer>> open(const std::filesystem::path& dir, AsyncHandler handler);

    // Closes the sockets and removes the socket files it created.
    ~ControlServer();
    ControlServer(const ControlServer&) = delete;
    ControlServer& operator=(const ControlServer&) = delete;

    // Serves requests until stop(). A request that cannot be decoded never
    // reaches the handler; it gets an ok:false reply ("malformed",
    // "too_large", "unsupported_version") echoing what could be read of
    // its type and id (else "" and 0). Returns success at once once stop()
    // has been called, however often run() is called again; an error
    // ("zmq_error") when the sockets fail and nothing more can be served.
    Status run();
    // Makes run() return promptly (wakes it through an inproc socket).
    // Not async-signal-safe (it takes a mutex): a daemon's signal handler
    // sets a flag or writes a pipe that a thread turns into stop().
    void stop();

    // Sends an event to every subscriber, never blocking: a subscriber that
    // is kEventQueueLength events behind misses events (its seq jumps). An
    // event that is not valid (a bad type, a body that is not a map or nil,
    // over the limits) is not sent; the daemon's tests should catch that.
    void publish(std::string_view type, const Value& body);

    std::filesystem::path dir() const { return m_dir; }

    // Fault injection for tests: shuts the sockets' context down, as a
    // libzmq failure would; run() then returns its error.
    void breakSockets();
    // kMaxHeldReplyBytes unless set (tests use a smaller bound).
    void setHeldReplyBudget(std::size_t bytes) { m_heldBudget.store(bytes); }

    struct Outbox; // replies waiting to be sent (control_server.cpp)

private:
    ControlServer(std::filesystem::path dir, AsyncHandler handler);
    Status bind();
    void serveOne();
    void sendReplies();
    void forgetConnection(int fd);

    std::filesystem::path m_dir;
    AsyncHandler m_handler;
    std::shared_ptr<Outbox> m_outbox;
    std::unique_ptr<zmq::context_t> m_context;
    std::unique_ptr<zmq::socket_t> m_router;
    std::unique_ptr<zmq::socket_t> m_monitor; // the ROUTER's disconnections
    // Replies possibly still queued for each client (run()'s thread only):
    // the sizes of the last kReplyPipeLength sent, by routing id, and the
    // connection (fd) each routing id came on, so a disconnection frees them.
    struct Held {
        std::deque<std::size_t> sizes;
        std::size_t bytes = 0;
    };
    std::unordered_map<std::string, Held> m_held;
    std::unordered_map<int, std::string> m_routeOfFd;
    std::size_t m_heldBytes = 0;
    std::atomic<std::size_t> m_heldBudget{kMaxHeldReplyBytes};
    std::unique_ptr<zmq::socket_t> m_wakeReceiver; // polled by run()
    std::unique_ptr<zmq::socket_t> m_wakeSender; // written by stop()
    std::mutex m_wakeMutex; // guards m_wakeSender
    std::unique_ptr<zmq::socket_t> m_publisher;
    std::mutex m_publishMutex; // guards m_publisher and m_lastSeq
    uint64_t m_lastSeq = 0;
    std::atomic<bool> m_stopping{false};
    // The socket files this server created (device and inode), so that the
    // destructor removes them and nothing put in their place.
    struct FileId {
        uint64_t device = 0;
        uint64_t inode = 0;
    };
    FileId m_controlFile;
    FileId m_eventsFile;
};

} // namespace crowdtrain::control
