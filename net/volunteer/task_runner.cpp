#include "net/volunteer/task_runner.h"

#include "core/thread_name.h"
#include "core/thread_priority.h"
#include "engine/diloco/manifest.h"
#include "net/limits/memory.h"
#include "net/wire/error_codes.h"

#include <algorithm>
#include <condition_variable>
#include <thread>

namespace crowdtrain::volunteer {
namespace {

using Clock = std::chrono::steady_clock;

// What the training thread shares with the thread that started it; both
// hold a share, so it lives as long as either needs it.
struct TrainingRun {
    std::mutex mutex;
    std::condition_variable finished;
    bool done = false;
    std::optional<Result<TaskOutcome>> outcome;
    std::atomic<bool> abort{false};
    std::atomic<bool> wrapUp{false};
    std::atomic<uint64_t> steps{0};
    std::atomic<double> lastLoss{0};
    std::atomic<double> tokensPerSecond{0};

    bool isDone()
    {
        std::lock_guard lock(mutex);
        return done;
    }
    // Waits up to `ms` for the outcome; true when it is there.
    bool waitDone(std::chrono::milliseconds ms)
    {
        std::unique_lock lock(mutex);
        return finished.wait_for(lock, ms, [&] { return done; });
    }
};

// The training thread's owner: whatever way the scope is left, the thread
// is told to abort and is joined.
class TrainingThread {
public:
    template <typename Body>
    TrainingThread(std::shared_ptr<TrainingRun> run, Body body)
        : m_run(std::move(run))
        , m_thread([run = m_run, body = std::move(body)]() mutable {
            core::nameThisThread("task-training");
            // It writes theta for the core and reads its weights back (GBs
            // at GPT-2 size): heavy work, below everything else, as the
            // core itself (core::asIdleWork).
            core::asIdleWork();
            auto outcome = body();
            std::lock_guard lock(run->mutex);
            run->outcome = std::move(outcome);
            run->done = true;
            run->finished.notify_all();
        })
    { }
    ~TrainingThread()
    {
        m_run->abort.store(true);
        if (m_thread.joinable())
            m_thread.join();
    }
    TrainingThread(const TrainingThread&) = delete;
    TrainingThread& operator=(const TrainingThread&) = delete;

    Result<TaskOutcome> join()
    {
        m_thread.join();
        return std::move(*m_run->outcome);
    }

private:
    std::shared_ptr<TrainingRun> m_run;
    std::thread m_thread;
};

} // namespace

namespace {

// "cuda" and "auto" name GPU 0; "cuda:N" GPU N; "cpu" the CPU; else "".
std::string canonicalDevice(const std::string& name)
{
    if (name == "cpu")
        return name;
    if (name == "cuda" || name == "auto")
        return "cuda:0";
    if (name.starts_with("cuda:") && name.size() > 5 && name.find_first_not_of("0123456789", 5) == std::string::npos)
        return "cuda:" + std::to_string(std::stoul(name.substr(5)));
    return {};
}

} // namespace

std::vector<net::TensorSpec> wireManifestOf(const engine::GptConfig& model)
{
    std::vector<net::TensorSpec> specs;
    for (const auto& entry : diloco::manifestOf(model).entries)
        specs.push_back({entry.name, std::vector<uint64_t>(entry.shape.begin(), entry.shape.end())});
    return specs;
}

Result<TrainingDevices> trainingDevicesFor(const AgentOptions& options, const engine::GptConfig& model,
    const net::InnerSettings& inner, const std::vector<std::string>& coreDevices)
{
    TrainingDevices chosen;
    chosen.device = options.device;
    // A GPU asked for and a core that has none (the CPU core, or a CUDA core
    // that found no device: CoreHost said why): training goes on on the CPU.
    const bool coreHasGpu
        = std::any_of(coreDevices.begin(), coreDevices.end(), [](const std::string& d) { return d != "cpu"; });
    if (options.device != "cpu" && !coreHasGpu)
        chosen.device = "cpu";
    // Devices the core reports, each GPU once (NCCL takes one rank a GPU);
    // CPU "devices" may repeat (they are threads).
    std::vector<std::string> usable;
    for (const std::string& name : options.devices) {
        const std::string canonical = canonicalDevice(name);
        if (canonical.empty() || std::find(coreDevices.begin(), coreDevices.end(), canonical) == coreDevices.end())
            continue;
        if (canonical != "cpu" && std::find(usable.begin(), usable.end(), canonical) != usable.end())
            continue;
        usable.push_back(canonical);
    }
    const int64_t batch = int64_t(inner.batchSize);
    const bool onCpu = chosen.device == "cpu" && usable.empty();
    const uint64_t budget = onCpu ? 0 : options.gpuMemoryBudgetBytes;
    limits::ModelShape shape{model.nLayer, model.nHead, model.nEmbd, model.blockSize, model.vocabSize,
        int64_t(net::manifestElements(wireManifestOf(model)))};
    std::string why;
    const auto plan = limits::planDevices(
        shape, batch, usable.size() >= 2 ? int(usable.size()) : 1, budget, why, options.hostMemoryBytes);
    if (!plan)
        return Error::make(net::errc::kBadOptions, why + " (gpu_memory_limit_mib / gpu_memory_free_mib)");
    if (plan->devices >= 2) {
        chosen.team.assign(usable.begin(), usable.begin() + plan->devices);
        chosen.zeroStage = plan->mode == limits::DeviceMode::Sharded ? 3 : 0;
        chosen.activationCheckpointing = plan->activationCheckpointing;
    } else {
        // One device under a budget: the planner's mode (plain, checkpointed,
        // 8-bit moments, both, or bf16 with the master in host RAM) goes to
        // the core's trainer.
        chosen.activationCheckpointing = plan->activationCheckpointing;
        chosen.int8Moments = plan->int8Moments;
        chosen.bf16HostMaster = plan->bf16HostMaster;
    }
    chosen.reason = plan->reason;
    chosen.microBatch = plan->microBatch;
    return chosen;
}

TaskRunner::TaskRunner(const AgentOptions& options, CoreHost& core, const std::filesystem::path& scratchDir,
    Session& session, Reporter& reporter, const std::atomic<bool>& stop)
    : m_options(options)
    , m_core(core)
    , m_session(session)
    , m_reporter(reporter)
    , m_stop(stop)
    , m_trainer(std::make_shared<CoreTrainer>(core,
          CoreTrainerOptions{.scratchDir = scratchDir,
              .stepTimeoutMs = options.coreStepTimeoutMs,
              .loadTimeoutMs = std::max(options.coreStepTimeoutMs, 600000)}))
{ }

void TaskRunner::configure(const engine::GptConfig& model, const net::InnerSettings& inner)
{
    if (!(model == m_model) || !(inner == m_inner))
        ++m_generation;
    m_model = model;
    m_inner = inner;
}

Result<TaskOutcome> TaskRunner::run(const net::Task& task, std::shared_ptr<const Theta> theta,
    std::unique_ptr<engine::BatchSource> source, const RunHooks& hooks)
{
    const uint64_t steps = task.innerSteps > 0 ? task.innerSteps : m_inner.steps;
    // The core's devices come from its hello: start it first, heartbeating
    // meanwhile.
    const bool aheadOfTheta = theta->version < task.version;
    if (Status started = m_session.whileAlive(
            [this] {
                auto lease = m_core.lease();
                return lease ? Status::success() : Status(lease.error());
            },
            aheadOfTheta ? theta->version : task.version);
        !started)
        return started.error();
    auto devices = trainingDevicesFor(m_options, m_model, m_inner, m_core.hello().devices);
    if (!devices)
        return devices.error();
    if (!devices->team.empty() && m_lastTeam != devices->team)
        m_reporter.log("training each task across %zu devices (%s first), %s%s, %lld sequences a pass on each",
            devices->team.size(), devices->team.front().c_str(),
            devices->zeroStage == 3 ? "sharded (ZeRO-3)" : "data parallel",
            devices->activationCheckpointing ? " with activation checkpointing" : "",
            static_cast<long long>(devices->microBatch));
    m_lastTeam = devices->team;
    if (devices->reason != m_reporter.summary().memoryPlan && !devices->reason.empty())
        m_reporter.log("memory plan: %s", devices->reason.c_str());
    m_reporter.summary().memoryPlan = devices->reason;
    CoreTaskRequest request;
    request.taskId = task.taskId;
    request.model = corelink::modelConfigOf(m_model);
    request.inner = m_inner;
    request.devices = std::move(*devices);
    request.threads = uint64_t(std::max(0, m_options.threads));
    request.steps = steps;
    request.firstGlobalStep = task.version * m_inner.steps;
    request.memoryBudgetBytes
        = request.devices.device == "cpu" && request.devices.team.empty() ? 0 : m_options.gpuMemoryBudgetBytes;
    request.memoryTotalBytes = m_options.gpuMemoryTotalBytes;
    const uint64_t generation = m_generation;
    const std::shared_ptr<CoreTrainer> trainer = m_trainer;

    auto run = std::make_shared<TrainingRun>();
    auto done = [&] { return run->steps.load(); };
    AgentSummary& summary = m_reporter.summary();
    summary.round = task.round;
    summary.taskId = task.taskId;
    summary.steps = steps;
    summary.step = 0;
    m_reporter.setPhase(AgentPhase::Training);

    const bool ahead = theta->version < task.version;
    const uint64_t heldVersion = theta->version;
    bool baseAsked = false;
    // The thread's own shares: a re-join below may replace the trainer or
    // theta_v of the agent, never these.
    TrainingThread thread(run,
        [run, trainer, request, theta = std::move(theta), source = std::move(source),
            betweenSteps = m_options.betweenSteps, release = m_options.releaseDevice]() mutable {
            auto onStep = [&](const corelink::StepDone& report) {
                run->steps.store(report.step);
                run->lastLoss.store(report.loss);
                run->tokensPerSecond.store(report.tokensPerSecond);
                if (betweenSteps)
                    betweenSteps(report.busyMs(), run->abort);
            };
            if (theta->values.empty()) // spilled: the core's copy comes from its file
                return trainer->run(
                    request, theta->file, theta->sha256, *source, run->abort, run->wrapUp, release, onStep);
            return trainer->run(
                request, theta->values, theta->sha256, *source, run->abort, run->wrapUp, release, onStep);
        });
    if (hooks.whileTraining) {
        hooks.whileTraining();
        m_reporter.setPhase(AgentPhase::Training);
    }
    auto baseIsOut = [&] {
        baseAsked = true;
        if (hooks.baseIsOut)
            hooks.baseIsOut();
    };

    auto wrapUp = [&](const char* how) {
        if (run->wrapUp.exchange(true))
            return;
        m_reporter.log("round %llu is wrapping up (%s): submitting after step %llu of %llu",
            static_cast<unsigned long long>(task.round), how, static_cast<unsigned long long>(done() + 1),
            static_cast<unsigned long long>(steps));
    };
    auto nextSummary = Clock::now();
    auto nextProgress = Clock::now() + std::chrono::seconds(5);
    while (true) {
        if (EventListener* events = m_session.events()) {
            // Short polls: the events socket is the fast path for a wrap-up.
            if (run->isDone())
                break;
            const ProjectEvents seen = events->wait(5);
            if (seen.wrapUpVersion == task.version)
                wrapUp("event");
            if (ahead && !baseAsked && seen.publishedVersion && *seen.publishedVersion >= task.version)
                baseIsOut();
        } else if (run->waitDone(std::chrono::milliseconds(50))) {
            break;
        }
        if (m_stop.load())
            run->abort.store(true);
        const auto now = Clock::now();
        if (now >= nextSummary) {
            nextSummary = now + std::chrono::milliseconds(200);
            summary.step = done();
            // Until the task's first step is done, the last task's figures stand.
            if (done() > 0) {
                summary.loss = run->lastLoss.load();
                summary.tokensPerSecond = run->tokensPerSecond.load();
            }
            m_reporter.publish();
        }
        if (now >= nextProgress) {
            nextProgress = now + std::chrono::seconds(5);
            m_reporter.log("task %llu: step %llu/%llu, loss %.4f, %.0f tok/s",
                static_cast<unsigned long long>(task.taskId), static_cast<unsigned long long>(done()),
                static_cast<unsigned long long>(steps), run->lastLoss.load(), run->tokensPerSecond.load());
        }
        auto beat = m_session.keepAlive(ahead && !baseAsked ? heldVersion : task.version);
        if (m_generation != generation && !run->abort.load()) {
            m_reporter.log("the project's model or inner settings changed while training task %llu; dropping it",
                static_cast<unsigned long long>(task.taskId));
            run->abort.store(true);
        }
        if (!beat)
            continue;
        if (ahead && !baseAsked && beat->version >= task.version)
            baseIsOut();
        if (beat->wrapUp && beat->version == task.version)
            wrapUp("heartbeat");
        const bool baseNotYetOut = ahead && beat->version + 1 == task.version;
        if (beat->version != task.version && !baseNotYetOut && !run->abort.load()) {
            m_reporter.log("round %llu closed while training task %llu; dropping it",
                static_cast<unsigned long long>(task.round), static_cast<unsigned long long>(task.taskId));
            run->abort.store(true);
        }
    }
    auto outcome = thread.join();
    summary.deviceName = trainer->started().deviceName;
    summary.parallelMode = trainer->started().parallelMode;
    summary.microBatch = int64_t(trainer->started().microBatch);
    if (m_generation != generation)
        return Error::make(net::errc::kCancelled, "the project changed its model or inner settings during the task");
    return outcome;
}

} // namespace crowdtrain::volunteer
