#pragma once

// bench_coordinator_scale's client side: one Driver thread simulates many
// volunteers, each with its own Curve key pair and DEALER socket. The thread
// waits on the sockets' ZMQ_FDs with epoll, sends requests without waiting
// for replies, and times every reply by its request id.

#include "bench/coordinator_process.h"
#include "net/transport/curve_socket.h"
#include "net/wire/messages.h"

#include <array>
#include <atomic>
#include <chrono>
#include <climits>
#include <map>
#include <queue>
#include <unordered_map>

namespace crowdtrain::bench {

enum class Kind { Join, Heartbeat, GetTask, Upload, Submit };
inline constexpr int kKinds = 5;
inline constexpr const char* kKindNames[kKinds] = {"join", "heartbeat", "get_task", "upload_chunk", "submit"};

inline int64_t nowNs()
{
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

struct BenchOptions {
    int seconds = 20; // measurement window per volunteer count
    int threads = 2; // driver threads
    double trainerFraction = 0.1;
    int computeMs = 2000; // between a task and its upload
    int tasksPerRound = 4;
    int heartbeatMs = 1000;
    int graceMs = 2000; // after the window, for late replies
    int joinsInFlight = 16; // per driver while ramping up
    ModelSize model;
};

// What the probe join learnt, and the payloads every trainer uploads.
struct ProjectFacts {
    uint64_t elements = 0;
    uint64_t chunkBytes = 0;
    uint64_t taskTokens = 0;
    std::vector<std::string> payloads; // int8
    std::vector<std::string> sha256;
};

// Between the main thread and the drivers.
struct Shared {
    std::string endpoint;
    std::string serverKey;
    ProjectFacts facts;
    std::atomic<int> joinsAnswered{0};
    std::atomic<int64_t> maxVersion{0};
    std::atomic<int64_t> windowStartNs{LLONG_MAX};
    std::atomic<int64_t> windowEndNs{LLONG_MAX};
    std::atomic<bool> stop{false};
};

struct DriverStats {
    std::array<std::vector<double>, kKinds> latencies; // ms; join: all, others: sent in the window
    int64_t repliesInWindow = 0;
    int64_t unanswered = 0; // sent in the window, never answered
    int64_t accepted = 0;
    int64_t errors = 0;
    std::map<std::string, int64_t> errorCodes; // "type: code"
};

class Driver {
public:
    Driver(zmq::context_t& context, Shared& shared, const BenchOptions& options, int firstIndex, int count);
    ~Driver();
    Driver(const Driver&) = delete;
    Driver& operator=(const Driver&) = delete;

    void run(); // until shared.stop
    const DriverStats& stats() const { return m_stats; }

private:
    enum class Phase { Idle, Asking, Computing, Uploading, Submitting };
    struct Volunteer {
        zmq::socket_t socket;
        net::CurveKeyPair keys;
        bool trainer = false;
        bool joined = false;
        std::string session;
        uint64_t version = 0;
        Phase phase = Phase::Idle;
        net::Task task;
        std::size_t payload = 0;
    };
    struct Pending {
        uint32_t volunteer;
        Kind kind;
        int64_t sentNs;
    };
    enum class Action { Heartbeat, Upload };
    struct Timer {
        int64_t dueNs;
        uint32_t volunteer;
        Action action;
        bool operator>(const Timer& o) const { return dueNs > o.dueNs; }
    };

    void startJoin(uint32_t v);
    template <typename Request> void send(uint32_t v, Kind kind, const Request& request);
    void drain(uint32_t v);
    void onReply(uint32_t v, std::string_view bytes);
    void onTimer(const Timer& timer);
    void sendChunk(uint32_t v, uint64_t index);
    void sendSubmit(uint32_t v, uint64_t chunks);
    void askForTask(uint32_t v);
    void error(Kind kind, const std::string& code);

    zmq::context_t& m_context;
    Shared& m_shared;
    BenchOptions m_options;
    int m_epoll = -1;
    std::vector<Volunteer> m_volunteers;
    std::unordered_map<uint64_t, Pending> m_pending;
    std::priority_queue<Timer, std::vector<Timer>, std::greater<>> m_timers;
    uint64_t m_nextId = 0;
    uint32_t m_nextJoin = 0;
    int m_joinsInFlight = 0;
    DriverStats m_stats;
};

} // namespace crowdtrain::bench
