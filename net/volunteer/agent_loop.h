#pragma once

// VolunteerAgent's implementation (private to net/volunteer): the state of one
// run() and its phases. agent_loop.cpp has the connection, join and main
// loop; agent_train.cpp the task (training with heartbeats, encoding,
// upload and submit); agent_sync.cpp keeps theta_v current (updates, full
// state). Everything here runs on run()'s thread except the training
// thread that agent_train.cpp starts and joins.

#include "engine/diloco/codec.h"
#include "net/transport/curve_keys.h"
#include "net/volunteer/agent.h"
#include "net/volunteer/backoff.h"
#include "net/volunteer/connection.h"
#include "net/volunteer/event_listener.h"
#include "net/volunteer/inner_trainer.h"
#include "net/volunteer/local_store.h"
#include "net/volunteer/piece_library.h"
#include "net/volunteer/range_source.h"
#include "net/wire/messages.h"

#include <chrono>
#include <optional>

namespace crowdtrain::volunteer {

// theta_v as this volunteer holds it.
struct Theta {
    uint64_t version = 0;
    std::string sha256;
    std::vector<float> values;
};

// A finished task's encoded pseudo-gradient, kept until the server has
// answered its submit (across reconnects).
struct PendingSubmission {
    net::Task task;
    std::string payload;
    std::string sha256;
    uint64_t tokens = 0;
    double computeMs = 0;
    double meanLoss = 0;
    uint64_t nextChunk = 0;
    // A submit went out and no answer came back (a lost connection, a
    // coordinator killed mid-reply): it may have been accepted.
    bool submitUnanswered = false;
};

class AgentLoop {
public:
    AgentLoop(VolunteerAgent& agent, const AgentOptions& options);
    ~AgentLoop();
    Status run();

private:
    using Clock = std::chrono::steady_clock;

    // agent_loop.cpp
    Status prepare();
    Status joinOnce();
    Status checkJoin(const net::JoinReply& reply);
    Status cycle();
    Status waitForWork(uint64_t retryAfterMs);
    Result<net::HeartbeatReply> heartbeat();
    void disconnect(const std::string& why);
    void listenForEvents();
    void leave();
    bool limitsReached() const;
    bool stopping() const { return m_agent.stopRequested(); }
    void sleepFor(uint64_t ms);
    int controlTimeoutMs() const;
    int transferTimeoutMs() const;
    void log(const char* format, ...) __attribute__((format(printf, 2, 3)));
    void publish();
    void setPhase(const char* phase);

    // agent_train.cpp
    Status obtainTask(std::optional<net::Task>& task);
    Status trainTask(const net::Task& task);
    void heartbeatWhileTraining(const net::Task& task, std::atomic<bool>& abort);
    Status submitPending();
    Status rejectPending(const Error& why);
    Status dropPending(const char* why);

    // agent_sync.cpp
    Status syncTheta();
    Status loadLocalState();
    Status applyOneUpdate();
    Status downloadFullState();
    Result<std::string> downloadResource(const std::string& resource, const std::string& expectedSha256);

    VolunteerAgent& m_agent;
    AgentOptions m_options;
    zmq::context_t m_context;
    net::CurveKeyPair m_keys;
    std::string m_serverKey;
    std::filesystem::path m_dataDir;
    std::optional<ProjectFolder> m_folder;
    std::unique_ptr<TokenLibrary> m_shards;
    Traffic m_traffic;
    std::unique_ptr<Connection> m_connection;
    std::optional<EventListener> m_events;

    bool m_joined = false;
    bool m_everJoined = false;
    net::JoinReply m_join;
    engine::GptConfig m_model;
    diloco::Codec m_codec = diloco::Codec::Int8;
    uint64_t m_elements = 0;
    uint64_t m_serverVersion = 0;
    uint64_t m_intervalMs = net::kHeartbeatIntervalMs;
    uint64_t m_liveness = net::kHeartbeatLiveness;
    std::vector<net::TensorSpec> m_checkedManifest;

    std::optional<Theta> m_theta;
    std::optional<uint64_t> m_startVersion;
    std::vector<float> m_residual;
    bool m_localStateLoaded = false;
    std::unique_ptr<InnerTrainer> m_trainer;
    std::optional<PendingSubmission> m_pending;
    ReconnectBackoff m_backoff;
    Clock::time_point m_started;
    AgentSummary m_summary;
};

} // namespace crowdtrain::volunteer
