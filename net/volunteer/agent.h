#pragma once

// The volunteer agent: joins one project on a coordinator and trains for it
// until stopped (docs/architecture.md, "Processes"; the round in
// docs/protocol.md, §6 "Rounds and versions (DiLoCo)"):
//   join -> theta_v (local file with the right SHA-256, or a download of the
//   state) -> get_task -> H inner AdamW steps -> Delta = theta_v - theta_local,
//   encoded with the project's codec and error feedback -> upload_chunk... ->
//   submit -> wait for version v+1 (heartbeats) -> get_update, apply, check
//   the SHA-256 (else the full state) -> next task.
// One thread (the caller of run()) owns the socket; training runs on a
// thread of its own while that thread keeps heartbeating. When the
// coordinator stops answering for `liveness` heartbeat intervals the agent
// reconnects with exponential backoff and joins again, keeping a finished
// pseudo-gradient for a version the server still holds. Identity
// (<data-dir>/identity.key), theta_v, the residual and partial downloads are
// kept under the data folder (local_store.h), so a restart is the same
// volunteer and downloads nothing it already has.
//
// Thread-safety: run() on one thread; stop() and summary() from any thread
// (stop() only sets an atomic flag, so a signal handler may call it).

#include "core/result.h"
#include "net/limits/throttle.h"
#include "net/swarm/swarm_session.h"
#include "net/volunteer/agent_phase.h"

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace crowdtrain::volunteer {

struct AgentSummary;
class CoreHost;

struct AgentOptions {
    std::string endpoint; // "tcp://host:port"
    std::string serverKey; // Z85, or "@FILE" / FILE holding it
    std::string project;
    std::string displayName;
    std::filesystem::path dataDir; // identity + state; empty: defaultDataDir()
    // The project's shards (crowdtrain-prepare output), for hosts who have
    // them; empty: each task's pieces come from the coordinator and are
    // cached under the data folder, at most pieceCacheBytes.
    std::filesystem::path preparedDataDir;
    uint64_t pieceCacheBytes = uint64_t(2) << 30;
    std::string device = "cpu"; // "cpu", "cuda", "cuda:N", "auto"
    // Two or more: each task trains across them (inner_trainer.h), data
    // parallel when the model fits one device, ZeRO-3 when it does not
    // (trainingDevicesFor in task_runner.h). Those this libtorch cannot use
    // are left out; fewer than two usable: `device` alone.
    std::vector<std::string> devices;
    int threads = 0; // torch intra-op threads for training (0 = as configured)
    uint64_t maxTasks = 0; // stop after this many submissions (0 = forever)
    uint64_t maxRounds = 0; // stop after the version advanced this many times (0 = forever)
    // Overlap: after a task, lease one for the next round at once and train
    // it while this one uploads and the round closes; the round's update is
    // blended into the weights when it arrives (docs/protocol.md, get_task
    // "ahead"). Off: wait for the round to close before the next task.
    bool overlap = false;
    std::string clientVersion; // sent at join
    std::function<void(const std::string&)> log; // progress lines; called on run()'s thread
    // Called with the summary each time it is published (every phase change
    // and inner step), on the thread that published it: run()'s or training's.
    std::function<void(const AgentSummary&)> published;
    // Called on the training thread after each inner step with the step's
    // busy time; it may block (a rest the busy-share governor asks for, or a
    // pause: the task's weights, optimizer state and data position stay in
    // memory, and heartbeats go on) and must return soon once `abort` is set.
    std::function<void(double stepMs, const std::atomic<bool>& abort)> betweenSteps;
    // The GPU memory training may use (0: no cap) and the device's total:
    // the micro-batch is chosen to fit (net/limits/memory.h) and libtorch's
    // caching allocator is held to it where libtorch is built with CUDA.
    uint64_t gpuMemoryBudgetBytes = 0;
    uint64_t gpuMemoryTotalBytes = 0;
    // The host RAM available when the project started (0: not known): a
    // plan that keeps the optimizer's state in host RAM must fit it.
    uint64_t hostMemoryBytes = 0;
    // Bandwidth limits and the count of bytes moved; null: none.
    std::shared_ptr<limits::NetworkThrottle> network;
    // Called on run()'s thread before asking for a task; it may block (a
    // pause between tasks) and must return soon once stop() is called.
    std::function<void()> beforeTask;
    // The swarm session a full state is fetched and seeded with when the
    // hub offers it as a torrent (state_swarm.h); called at the first such
    // state; null, or returning null: chunks only. Its owner applies the
    // limits and counts its traffic.
    std::function<swarm::SwarmSession*()> swarm;
    std::function<bool()> swarmSeeding; // whether to seed it now; null: yes
    // The training core (crowdtrain-core, docs/protocol.md §13); empty:
    // corelink::defaultCoreBinary(). A step the core does not report within
    // coreStepTimeoutMs (or 10 times its slowest step) counts as a hang.
    std::filesystem::path coreBinary;
    std::filesystem::path cudaCoreBinary; // empty: corelink::defaultCudaCoreBinary()
    // Try the CUDA core first (the daemon sets it when the settings allow a
    // GPU and NVML sees one); see CoreHost.
    bool tryCudaCore = false;
    // What `join` tells the project this machine trains on ("CPU", "NVIDIA
    // GeForce RTX 4090, 24 GiB"); empty: "CPU" for device cpu, else device.
    std::string deviceLabel;
    int coreStepTimeoutMs = 120000;
    // Read between steps and between tasks: true when the device should be
    // given back (a long pause, a snooze, the schedule, a game on the GPU):
    // the task in hand wraps up with the steps done and the core exits.
    std::function<bool()> releaseDevice;
    // For adversarial benchmarks only (bench/hostile_worker.cpp): changes the
    // pseudo-gradient before it is encoded, as a hostile volunteer would.
    std::function<void(std::vector<float>& delta)> alterPseudoGradient;
};

struct AgentSummary {
    uint64_t tasks = 0; // submissions judged by the server (accepted + rejected)
    uint64_t accepted = 0;
    uint64_t rejected = 0;
    uint64_t dropped = 0; // trained but not counted: cancelled, stale or unknown to the server
    // Submitted, the answer lost (a dropped connection, a coordinator killed
    // mid-reply), and the task then unknown to the coordinator: it may have
    // been accepted; my_stats has the coordinator's count.
    uint64_t unconfirmed = 0;
    uint64_t tokens = 0; // tokens trained in inner steps
    double computeMs = 0; // time inside inner steps
    double wallMs = 0; // since run() started
    double firstTaskMs = 0; // wallMs when the first task began training (after joining and the first sync)
    uint64_t bytesSent = 0; // request frames
    uint64_t bytesReceived = 0; // reply frames
    uint64_t version = 0; // theta_v held at the end
    uint64_t reconnects = 0;

    // What the agent does now, for a status display.
    AgentPhase phase = AgentPhase::Starting;
    std::string lastError; // the last error that made it wait or reconnect
    uint64_t round = 0; // the round of the task in hand, else the open one
    uint64_t taskId = 0;
    uint64_t step = 0; // inner steps done in the task in hand
    uint64_t steps = 0; // of H
    double loss = 0; // of the last inner step
    double tokensPerSecond = 0; // of the last inner step
    uint64_t pieceFetches = 0; // downloads of task data that fetched something from the coordinator
    uint64_t requests = 0; // requests sent to the coordinator (every kind, heartbeats too)
    uint64_t heartbeats = 0; // of those, heartbeats
    uint64_t dataRequests = 0; // of those, describe and fetch requests for task data
    int64_t microBatch = 0; // sequences per forward/backward pass (0 before the first task)
    std::string deviceName; // where training runs ("cpu", "cuda:0", "cuda:0,cuda:1"); "" before the first task
    std::string parallelMode; // across several devices: "data_parallel", "sharded" (ZeRO-3); else ""
    // The memory planner's mode on the device and why (limits::DevicePlan::reason):
    // plain, checkpointed, 8-bit moments; "" with no budget (the whole batch at once)
    std::string memoryPlan;
    std::string coreFamily; // the training core's: "cpu", "cuda"; "" before one started
    std::string coreRuntime; // e.g. "libtorch 1.13.1"
    std::string cudaRefusal; // why the CUDA core is not used ("" when it is or was not tried)
    bool coreRunning = false; // a core runs now (none while the device is given back)

    // computeMs / wallMs
    double utilisation() const { return wallMs > 0 ? computeMs / wallMs : 0.0; }
    // {"tasks":..,"accepted":..,"rejected":..,"tokens":..,"compute_s":..,"wall_s":..,
    //  "bytes_sent":..,"bytes_received":..,"version":..,"requests":..,"data_requests":..}
    // plus a few extras.
    std::string toJson() const;
};

// The volunteer as people name it: its display name, else "anonymous
// volunteer" and its tag (net::anonymousTag), as the app's leaderboard
// shows it; never the raw key.
std::string volunteerWords(const std::string& displayName, const std::string& publicKey);

class AgentLoop;

class VolunteerAgent {
public:
    explicit VolunteerAgent(AgentOptions options);
    ~VolunteerAgent();
    VolunteerAgent(const VolunteerAgent&) = delete;
    VolunteerAgent& operator=(const VolunteerAgent&) = delete;

    // Runs until stop(), a limit, or an error no retry can fix (a bad key,
    // an unknown project, a data folder that does not match, a disk error).
    // Network trouble is never such an error: it is retried forever.
    Status run();
    void stop() { m_stop.store(true); }
    bool stopRequested() const { return m_stop.load(); }
    AgentSummary summary() const;
    // Ends the training core now if it is idle, else once its task ends,
    // freeing its device memory; the next task starts a new one. Any thread.
    void releaseCore(const std::string& why);
    // Whether a training core runs now, and how many were started.
    bool coreRunning() const;
    uint64_t coreStarts() const;

private:
    friend class AgentLoop;
    friend class Reporter;
    void publish(const AgentSummary& summary);

    AgentOptions m_options;
    std::unique_ptr<CoreHost> m_core;
    std::atomic<bool> m_stop{false};
    mutable std::mutex m_summaryMutex;
    AgentSummary m_summary;
};

} // namespace crowdtrain::volunteer
