#include "net/control/control_server.h"

#include "core/clock.h"
#include "net/control/control_paths.h"

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <unordered_map>
#include <zmq.hpp>

namespace crowdtrain::control {

namespace {

constexpr const char* kWakeEndpoint = "inproc://crowdtrain-control-wake";
constexpr const char* kMonitorEndpoint = "inproc://crowdtrain-control-monitor";

// Whether something still listens on the ipc socket file at `path`.
// libzmq removes an existing file when it binds, so without this check a
// second daemon started past the lock would silently take the first one's
// clients.
bool acceptsConnections(const std::filesystem::path& path)
{
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    const std::string name = path.string();
    if (name.size() >= sizeof address.sun_path)
        return false; // binding fails anyway, with a clear message
    std::memcpy(address.sun_path, name.c_str(), name.size() + 1);
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return false;
    const bool live
        = ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0 || errno == EAGAIN;
    ::close(fd);
    return live;
}

Error bindFailed(const std::string& endpoint, const std::string& why)
{
    return Error::make(errc::kBindFailed, "cannot listen on " + endpoint + ": " + why);
}

} // namespace

// Replies made on any thread, sent by run()'s thread. `wake` is cleared
// (under the mutex) when the server goes, so late answers go nowhere.
struct ControlServer::Outbox {
    struct Reply {
        std::string route;
        RequestHeader header;
        std::string frame;
    };
    std::mutex mutex;
    std::deque<Reply> replies;
    std::function<void()> wake;
    std::atomic<std::size_t> inFlight{0};
    std::unordered_map<std::string, int> waitingByRoute; // under the mutex

    // One more request of `route` waits for its answer, unless
    // kReplyQueueLength already do.
    bool admit(const std::string& route)
    {
        std::lock_guard lock(mutex);
        int& waiting = waitingByRoute[route];
        if (waiting >= kReplyQueueLength)
            return false;
        ++waiting;
        return true;
    }

    void post(Reply reply, bool admitted)
    {
        std::lock_guard lock(mutex);
        if (admitted) {
            auto it = waitingByRoute.find(reply.route);
            if (it != waitingByRoute.end() && --it->second <= 0)
                waitingByRoute.erase(it);
        }
        if (!wake)
            return;
        replies.push_back(std::move(reply));
        wake();
    }
};

struct Responder::State {
    std::shared_ptr<ControlServer::Outbox> outbox;
    std::string route;
    RequestHeader header;
    bool admitted = false; // counted in the client's waiting requests
    std::atomic<bool> answered{false};

    void answer(Result<Value> outcome)
    {
        if (answered.exchange(true))
            return;
        outbox->post({route, header, encodeReply(header, std::move(outcome))}, admitted);
        outbox->inFlight.fetch_sub(1);
    }
    ~State() { answer(Error::make(errc::kInternal, "the daemon dropped the request \"" + header.type + "\"")); }
};

void Responder::operator()(Result<Value> outcome) const
{
    m_state->answer(std::move(outcome));
}

Result<std::unique_ptr<ControlServer>> ControlServer::open(const std::filesystem::path& dir, Handler handler)
{
    if (!handler)
        return Error::make(net::errc::kInvalidArgument, "ControlServer::open needs a handler");
    return open(
        dir, [handler = std::move(handler)](const Request& request, Responder respond) { respond(handler(request)); });
}

Result<std::unique_ptr<ControlServer>> ControlServer::open(const std::filesystem::path& dir, AsyncHandler handler)
{
    if (!handler)
        return Error::make(net::errc::kInvalidArgument, "ControlServer::open needs a handler");
    if (Status prepared = preparePrivateDir(dir); !prepared)
        return prepared.error();
    for (const std::string_view name : {kControlSocketName, kEventsSocketName}) {
        const std::filesystem::path path = dir / name;
        if (acceptsConnections(path))
            return bindFailed("ipc://" + path.string(), "another Crowdtrain daemon is serving it");
        // Stale, from a daemon that died: the caller's lock says it is ours.
        if (::unlink(path.c_str()) != 0 && errno != ENOENT)
            return bindFailed(
                "ipc://" + path.string(), std::string("cannot remove the stale socket file: ") + std::strerror(errno));
    }
    std::unique_ptr<ControlServer> server(new ControlServer(dir, std::move(handler)));
    if (Status bound = server->bind(); !bound)
        return bound.error();
    return server;
}

ControlServer::ControlServer(std::filesystem::path dir, AsyncHandler handler)
    : m_dir(std::move(dir))
    , m_handler(std::move(handler))
    , m_outbox(std::make_shared<Outbox>())
{ }

Status ControlServer::bind()
{
    // Binds one socket file, makes it owner-only and remembers which file it is.
    const auto bindFile = [this](zmq::socket_t& socket, std::string_view name, FileId& file) -> Status {
        const std::filesystem::path path = m_dir / name;
        const std::string endpoint = "ipc://" + path.string();
        try {
            socket.bind(endpoint);
        } catch (const zmq::error_t& e) {
            return bindFailed(endpoint, e.what());
        }
        struct stat info { };
        if (::chmod(path.c_str(), 0600) != 0 || ::lstat(path.c_str(), &info) != 0)
            return bindFailed(endpoint, std::string("cannot set the socket file's mode: ") + std::strerror(errno));
        file = {static_cast<uint64_t>(info.st_dev), static_cast<uint64_t>(info.st_ino)};
        return Status::success();
    };
    try {
        m_context = std::make_unique<zmq::context_t>(1);
        m_router = std::make_unique<zmq::socket_t>(*m_context, zmq::socket_type::router);
        m_router->set(zmq::sockopt::linger, 0);
        m_router->set(zmq::sockopt::sndhwm, kReplyPipeLength);
        m_router->set(zmq::sockopt::rcvhwm, kRequestQueueLength);
        // Replies to a client whose queue is full, or that is gone, are
        // dropped rather than blocking the loop or growing memory.
        m_router->set(zmq::sockopt::router_mandatory, false);
        m_router->set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(kMaxRequestBytes));
        m_publisher = std::make_unique<zmq::socket_t>(*m_context, zmq::socket_type::pub);
        m_publisher->set(zmq::sockopt::linger, 0);
        m_publisher->set(zmq::sockopt::sndhwm, kEventQueueLength);
        m_wakeReceiver = std::make_unique<zmq::socket_t>(*m_context, zmq::socket_type::pair);
        m_wakeReceiver->set(zmq::sockopt::linger, 0);
        m_wakeReceiver->bind(kWakeEndpoint);
        m_wakeSender = std::make_unique<zmq::socket_t>(*m_context, zmq::socket_type::pair);
        m_wakeSender->set(zmq::sockopt::linger, 0);
        m_wakeSender->connect(kWakeEndpoint);
        if (zmq_socket_monitor(m_router->handle(), kMonitorEndpoint, ZMQ_EVENT_DISCONNECTED) != 0)
            throw zmq::error_t();
        m_monitor = std::make_unique<zmq::socket_t>(*m_context, zmq::socket_type::pair);
        m_monitor->set(zmq::sockopt::linger, 0);
        m_monitor->connect(kMonitorEndpoint);
    } catch (const zmq::error_t& e) {
        return Error::make(errc::kBindFailed, std::string("cannot create the control sockets: ") + e.what());
    }
    m_outbox->wake = [this] {
        std::lock_guard lock(m_wakeMutex);
        try {
            m_wakeSender->send(zmq::str_buffer("reply"), zmq::send_flags::dontwait);
        } catch (const zmq::error_t&) {
            // The wake queue is full: run() is being woken already.
        }
    };
    if (Status bound = bindFile(*m_router, kControlSocketName, m_controlFile); !bound)
        return bound;
    return bindFile(*m_publisher, kEventsSocketName, m_eventsFile);
}

ControlServer::~ControlServer()
{
    {
        std::lock_guard lock(m_outbox->mutex);
        m_outbox->wake = nullptr;
        m_outbox->replies.clear();
    }
    m_monitor.reset();
    m_router.reset();
    m_publisher.reset();
    m_wakeReceiver.reset();
    m_wakeSender.reset();
    m_context.reset(); // waits for libzmq to close the listeners
    // libzmq removes the files of its listeners itself; this covers what
    // it leaves, and only if it is still the file this server bound.
    const auto removeOwn = [this](std::string_view name, const FileId& file) {
        const std::filesystem::path path = m_dir / name;
        struct stat info { };
        if (file.inode != 0 && ::lstat(path.c_str(), &info) == 0 && static_cast<uint64_t>(info.st_dev) == file.device
            && static_cast<uint64_t>(info.st_ino) == file.inode)
            ::unlink(path.c_str());
    };
    removeOwn(kControlSocketName, m_controlFile);
    removeOwn(kEventsSocketName, m_eventsFile);
}

Status ControlServer::run()
{
    while (!m_stopping.load()) {
        std::array<zmq::pollitem_t, 3> items{{
            {m_router->handle(), 0, ZMQ_POLLIN, 0},
            {m_wakeReceiver->handle(), 0, ZMQ_POLLIN, 0},
            {m_monitor->handle(), 0, ZMQ_POLLIN, 0},
        }};
        try {
            zmq::poll(items);
            if (items[1].revents & ZMQ_POLLIN) {
                zmq::message_t wake;
                while (m_wakeReceiver->recv(wake, zmq::recv_flags::dontwait)) { }
            }
            // A monitor event: [event id (uint16) + value (uint32, the fd)] [endpoint].
            for (zmq::message_t event; m_monitor->recv(event, zmq::recv_flags::dontwait);) {
                zmq::message_t endpoint;
                if (event.more())
                    (void)m_monitor->recv(endpoint, zmq::recv_flags::dontwait);
                if (event.size() == 6) {
                    uint16_t id = 0;
                    uint32_t fd = 0;
                    std::memcpy(&id, event.data(), 2);
                    std::memcpy(&fd, static_cast<const char*>(event.data()) + 2, 4);
                    if (id == ZMQ_EVENT_DISCONNECTED)
                        forgetConnection(int(fd));
                }
            }
            // A few requests at a time, so that answers made elsewhere
            // are sent between them.
            for (int i = 0; i < 16 && (items[0].revents & ZMQ_POLLIN) && !m_stopping.load(); ++i) {
                serveOne();
                if (!(m_router->get(zmq::sockopt::events) & ZMQ_POLLIN))
                    break;
            }
            sendReplies();
        } catch (const zmq::error_t& e) {
            if (e.num() == EINTR)
                continue; // a signal: the daemon's handler decides whether to stop()
            if (m_stopping.load())
                break;
            return Error::make(errc::kZmqError, std::string("the control socket failed: ") + e.what());
        }
    }
    return Status::success();
}

void ControlServer::breakSockets()
{
    zmq_ctx_shutdown(m_context->handle());
}

void ControlServer::stop()
{
    m_stopping.store(true);
    std::lock_guard lock(m_wakeMutex);
    try {
        m_wakeSender->send(zmq::str_buffer("stop"), zmq::send_flags::dontwait);
    } catch (const zmq::error_t&) {
        // The wake queue is full: run() is being woken already.
    }
}

void ControlServer::serveOne()
{
    zmq::message_t route;
    if (!m_router->recv(route, zmq::recv_flags::dontwait) || !route.more())
        return;
    zmq::message_t payload;
    if (!m_router->recv(payload, zmq::recv_flags::dontwait))
        return;
    // A client sends exactly one frame; count and drop any further ones
    // (the parts of a message arrive together, so these never wait).
    std::size_t frames = 1;
    for (bool more = payload.more(); more; ++frames) {
        zmq::message_t extra;
        if (!m_router->recv(extra, zmq::recv_flags::dontwait))
            break;
        more = extra.more();
    }
    auto state = std::make_shared<Responder::State>();
    state->outbox = m_outbox;
    state->route = route.to_string();
    // Which connection this client is on, so its held replies are
    // forgotten when it goes (a reused fd means the old one has gone).
    if (const int fd = zmq_msg_get(payload.handle(), ZMQ_SRCFD); fd >= 0) {
        auto [it, added] = m_routeOfFd.try_emplace(fd, state->route);
        if (!added && it->second != state->route) {
            forgetConnection(fd);
            m_routeOfFd.emplace(fd, state->route);
        }
    }
    m_outbox->inFlight.fetch_add(1);
    Responder respond(state);
    if (frames > 1)
        return respond(Error::make(errc::kMalformed, "a request is one frame; this one had " + std::to_string(frames)));
    auto request = decodeRequest(payload.to_string_view(), state->header);
    if (!request)
        return respond(request.error());
    if (m_outbox->inFlight.load() > kMaxRequestsInFlight)
        return respond(Error::make(errc::kBusy,
            std::to_string(kMaxRequestsInFlight) + " requests are waiting for answers; try again shortly"));
    state->admitted = m_outbox->admit(state->route);
    if (!state->admitted)
        return respond(Error::make(errc::kBusy,
            "this client has " + std::to_string(kReplyQueueLength)
                + " requests waiting for answers; read their replies first"));
    try {
        m_handler(*request, respond);
    } catch (const std::exception& e) {
        respond(Error::make(errc::kInternal, "the daemon failed on \"" + request->type + "\": " + e.what()));
    } catch (...) {
        respond(Error::make(errc::kInternal, "the daemon failed on \"" + request->type + "\""));
    }
}

void ControlServer::sendReplies()
{
    std::deque<Outbox::Reply> replies;
    {
        std::lock_guard lock(m_outbox->mutex);
        replies.swap(m_outbox->replies);
    }
    const std::size_t budget = m_heldBudget.load();
    for (Outbox::Reply& reply : replies) {
        // What this client's queue may hold once this reply is in it: its
        // last kReplyPipeLength replies. Past the bound over all clients,
        // a short "busy" replaces the reply.
        Held& held = m_held[reply.route];
        const std::size_t leaving
            = held.sizes.size() >= std::size_t(kReplyPipeLength) ? held.sizes.front() : std::size_t(0);
        if (m_heldBytes - leaving + reply.frame.size() > budget)
            reply.frame = encodeReply(reply.header,
                Error::make(errc::kBusy,
                    "the daemon holds " + std::to_string(m_heldBytes >> 20)
                        + " MiB of replies its clients have not read yet; try again shortly"));
        // Never blocks: with ROUTER_MANDATORY off a full or gone peer's
        // reply is dropped, and a failed send must not end the loop.
        try {
            m_router->send(zmq::buffer(reply.route), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
            m_router->send(zmq::buffer(reply.frame), zmq::send_flags::dontwait);
        } catch (const zmq::error_t&) {
            continue;
        }
        held.sizes.push_back(reply.frame.size());
        held.bytes += reply.frame.size();
        m_heldBytes += reply.frame.size();
        if (held.sizes.size() > std::size_t(kReplyPipeLength)) {
            held.bytes -= held.sizes.front();
            m_heldBytes -= held.sizes.front();
            held.sizes.pop_front();
        }
    }
}

void ControlServer::forgetConnection(int fd)
{
    auto route = m_routeOfFd.find(fd);
    if (route == m_routeOfFd.end())
        return;
    if (auto held = m_held.find(route->second); held != m_held.end()) {
        m_heldBytes -= held->second.bytes;
        m_held.erase(held);
    }
    m_routeOfFd.erase(route);
}

void ControlServer::publish(std::string_view type, const Value& body)
{
    std::lock_guard lock(m_publishMutex);
    // Under the lock, so that seq and time follow the order of sending.
    const auto timeMs = static_cast<uint64_t>(core::unixNowMs());
    auto bytes = encodeEvent(type, m_lastSeq + 1, timeMs, body);
    if (!bytes)
        return;
    ++m_lastSeq;
    try {
        m_publisher->send(zmq::buffer(type), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
        m_publisher->send(zmq::buffer(*bytes), zmq::send_flags::dontwait);
    } catch (const zmq::error_t&) {
        // A PUB socket drops rather than fails; nothing to do if it does.
    }
}

} // namespace crowdtrain::control
