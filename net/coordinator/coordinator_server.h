#pragma once

// crowdtrain-server's engine room: one ROUTER socket for requests and one PUB
// socket for events, both CurveZMQ with the server's key pair (plaintext
// clients never get past the handshake), serving one or more projects. One
// thread runs the loop: receive, check size, decode, dispatch to the
// project, reply; every tick it lets each project expire peers and close
// rounds, and publishes what they report. A submit's reply comes from a
// later tick when its acceptance is made durable on the project's worker:
// the loop keeps the request's route until then.

#include "net/coordinator/project_spec.h"
#include "net/coordinator/runtime_options.h"
#include "net/swarm/swarm_session.h"
#include "net/transport/curve_keys.h"
#include "net/transport/zap_authenticator.h"
#include "net/wire/envelope.h"

#include <atomic>
#include <filesystem>
#include <map>
#include <memory>
#include <utility>
#include <zmq.hpp>

namespace crowdtrain::coordinator {

// crowdtrain-server's ports unless told otherwise: requests, then events.
inline constexpr int kDefaultRequestPort = 7400;
inline constexpr int kDefaultEventsPort = 7401;

struct ServerOptions {
    std::string bindEndpoint = "tcp://127.0.0.1:" + std::to_string(kDefaultRequestPort); // requests (ROUTER)
    std::string publishEndpoint = "tcp://127.0.0.1:" + std::to_string(kDefaultEventsPort); // events (PUB)
    net::CurveKeyPair keys;
    std::filesystem::path stateDir; // one sub-folder per project
    RuntimeOptions runtime;
    int tickMs = 50;
    // The BitTorrent seed of published checkpoints (project_swarm.h);
    // nullopt: no swarm, checkpoints are served in chunks only.
    std::optional<swarm::SwarmSettings> swarm;
};

class CoordinatorServer {
public:
    static Result<std::unique_ptr<CoordinatorServer>> start(ServerOptions options, std::vector<ProjectSpec> projects);
    ~CoordinatorServer();

    // Serves until stop() (from any thread or a signal handler): success.
    // A failure of the loop itself (the sockets) ends it with the reason; a
    // project's failed tick is logged, counted and tried again next period.
    Status run();
    void stop() { m_stop.store(true); }

    std::string requestEndpoint() const; // after binding "tcp://127.0.0.1:*": the real port
    std::string publishEndpoint() const;
    const net::CurveKeyPair& keys() const { return m_options.keys; }

    // The reply bytes for one request from `peerKey`, whose connection
    // comes from IP `peerAddress` ("" when unknown) (exposed for tests).
    std::string handle(
        std::string_view request, const std::string& peerKey, int64_t nowMs, const std::string& peerAddress = {});

    // The swarm's listening port (0 without a swarm), the payload bytes the
    // hub sent through it (checkpoints and states), the bytes of
    // checkpoints and of states in `fetch` replies the socket took, and the
    // replies it dropped (the client's queue full, or the client gone),
    // since it started.
    uint16_t swarmPort() const { return m_swarm ? m_swarm->listenPort() : 0; }
    uint64_t swarmBytesSent() const { return m_swarm ? m_swarm->totalUploaded() : 0; }
    uint64_t checkpointChunkBytesSent() const { return m_checkpointChunkBytes.load(); }
    uint64_t stateChunkBytesSent() const { return m_stateChunkBytes.load(); }
    uint64_t droppedReplies() const { return m_droppedReplies.load(); }

    // Set before run(): called on the loop's thread after each project's
    // tick (the public page's feed reads the project's queries there).
    void setTickObserver(std::function<void(ProjectRuntime&, int64_t nowMs)> observer)
    {
        m_tickObserver = std::move(observer);
    }

    // Ticks of a project that threw since start (each is logged).
    uint64_t failedTicks() const { return m_failedTicks.load(); }

private:
    explicit CoordinatorServer(ServerOptions options);
    Result<std::string> dispatch(
        const net::Envelope& envelope, const std::string& peerKey, int64_t nowMs, const std::string& peerAddress);
    // The requests whose reply may come from a later tick (submit: once
    // its acceptance is durable; get_task: once its task's record is).
    template <typename Request, typename Reply>
    Result<std::string> serveLater(const net::Envelope& envelope, const std::string& peerKey, int64_t nowMs,
        const std::function<void(ProjectRuntime&, const Request&, std::function<void(Result<Reply>)>)>& start,
        const std::function<void(ProjectRuntime&)>& finish);
    ProjectRuntime* project(const std::string& name);
    void publish(const PublishedEvents& events);
    void tickProjects();

    ServerOptions m_options;
    zmq::context_t m_context;
    std::unique_ptr<net::ZapAuthenticator> m_zap;
    zmq::socket_t m_router;
    zmq::socket_t m_pub;
    std::unique_ptr<swarm::SwarmSession> m_swarm; // outlives the projects, which seed through it
    std::map<std::string, std::unique_ptr<ProjectRuntime>, std::less<>> m_projects;
    std::atomic<uint64_t> m_checkpointChunkBytes{0};
    std::atomic<uint64_t> m_stateChunkBytes{0};
    std::pair<uint64_t, uint64_t> m_replyChunkBytes; // of the reply being made: checkpoint, state
    std::atomic<uint64_t> m_droppedReplies{0};
    // The request being handled in run(): its route, which a reply that
    // comes later (serveLater) takes; set when it did.
    std::vector<zmq::message_t>* m_route = nullptr;
    bool m_replyLater = false;
    std::atomic<bool> m_stop{false};
    std::atomic<uint64_t> m_failedTicks{0};
    std::function<void(ProjectRuntime&, int64_t nowMs)> m_tickObserver;
};

} // namespace crowdtrain::coordinator
