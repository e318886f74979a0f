#include "net/volunteer/task_runner.h"

#include "net/limits/memory.h"
#include "net/wire/error_codes.h"

#if __has_include(<c10/cuda/CUDACachingAllocator.h>) && __has_include(<cuda_runtime_api.h>)
#include <c10/cuda/CUDACachingAllocator.h>
#define CROWDTRAIN_HAS_CUDA_ALLOCATOR 1
#else
#define CROWDTRAIN_HAS_CUDA_ALLOCATOR 0
#endif

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

Result<TrainingDevices> trainingDevicesFor(
    const AgentOptions& options, const engine::GptConfig& model, const net::InnerSettings& inner)
{
    TrainingDevices chosen;
    chosen.device = options.device;
    // Devices this libtorch can reach, each GPU once (NCCL takes one rank a
    // GPU); CPU "devices" may repeat (they are threads).
    std::vector<std::string> usable;
    for (const std::string& name : options.devices) {
        const auto device = engine::resolveDevice(name);
        if (!device)
            continue;
        if (device->is_cuda()) {
            const int index = device->has_index() ? device->index() : 0;
            const std::string canonical = "cuda:" + std::to_string(index);
            if (index >= int(torch::cuda::device_count())
                || std::find(usable.begin(), usable.end(), canonical) != usable.end())
                continue;
            usable.push_back(canonical);
        } else {
            usable.push_back(device->str());
        }
    }
    const int64_t batch = int64_t(inner.batchSize);
    const bool onCpu = options.device == "cpu" && usable.empty();
    const uint64_t budget = onCpu ? 0 : options.gpuMemoryBudgetBytes;
    limits::ModelShape shape{model.nLayer, model.nHead, model.nEmbd, model.blockSize, model.vocabSize,
        int64_t(net::manifestElements(InnerTrainer::wireManifestOf(model)))};
    std::string why;
    const auto plan = limits::planDevices(shape, batch, usable.size() >= 2 ? int(usable.size()) : 1, budget, why);
    if (!plan)
        return Error::make(net::errc::kBadOptions, why + " (gpu_memory_limit_mib / gpu_memory_free_mib)");
    if (plan->devices >= 2) {
        chosen.team.assign(usable.begin(), usable.begin() + plan->devices);
        chosen.zeroStage = plan->mode == limits::DeviceMode::Sharded ? 3 : 0;
        chosen.activationCheckpointing = plan->activationCheckpointing;
    }
    chosen.microBatch = plan->microBatch;
#if CROWDTRAIN_HAS_CUDA_ALLOCATOR
    if (options.gpuMemoryTotalBytes > 0 && budget > 0) {
        const double fraction = std::min(1.0, double(budget) / double(options.gpuMemoryTotalBytes));
        const std::vector<std::string> devices = chosen.team.empty() ? std::vector{chosen.device} : chosen.team;
        for (const std::string& d : devices) {
            const auto colon = d.find(':');
            const int index = colon == std::string::npos ? 0 : std::stoi(d.substr(colon + 1));
            if (d != "cpu") // "auto" and "cuda" are GPU 0
                c10::cuda::CUDACachingAllocator::setMemoryFraction(fraction, c10::DeviceIndex(index));
        }
    }
#endif
    return chosen;
}

TaskRunner::TaskRunner(const AgentOptions& options, Session& session, Reporter& reporter, const std::atomic<bool>& stop)
    : m_options(options)
    , m_session(session)
    , m_reporter(reporter)
    , m_stop(stop)
{ }

void TaskRunner::configure(const engine::GptConfig& model, const net::InnerSettings& inner)
{
    if (m_trainer && !m_trainer->sameSettings(model, inner))
        m_trainer.reset();
    m_model = model;
    m_inner = inner;
}

Result<TaskOutcome> TaskRunner::run(const net::Task& task, std::shared_ptr<const Theta> theta,
    std::unique_ptr<engine::BatchSource> source, const RunHooks& hooks)
{
    const uint64_t steps = task.innerSteps > 0 ? task.innerSteps : m_inner.steps;
    if (!m_trainer) {
        auto devices = trainingDevicesFor(m_options, m_model, m_inner);
        if (!devices)
            return devices.error();
        if (!devices->team.empty())
            m_reporter.log("training each task across %zu devices (%s first), %s%s, %lld sequences a pass on each",
                devices->team.size(), devices->team.front().c_str(),
                devices->zeroStage == 3 ? "sharded (ZeRO-3)" : "data parallel",
                devices->activationCheckpointing ? " with activation checkpointing" : "",
                static_cast<long long>(devices->microBatch));
        m_trainer = std::make_shared<InnerTrainer>(m_model, m_inner, std::move(*devices), m_options.threads);
    }
    // This task's trainer: a re-join below may reset m_trainer (the project
    // came back with another model or inner settings), never this share.
    const std::shared_ptr<InnerTrainer> trainer = m_trainer;
    m_reporter.summary().microBatch = trainer->microBatch();
    const uint64_t firstStep = uint64_t(trainer->innerStepsTaken());
    const uint64_t firstGlobalStep = task.version * m_inner.steps;

    auto run = std::make_shared<TrainingRun>();
    auto done = [&] {
        const uint64_t now = run->steps.load();
        return now >= firstStep ? now - firstStep : 0;
    };
    AgentSummary& summary = m_reporter.summary();
    summary.round = task.round;
    summary.taskId = task.taskId;
    summary.steps = steps;
    summary.step = 0;
    m_reporter.setPhase("training");

    const bool ahead = theta->version < task.version;
    const uint64_t heldVersion = theta->version;
    bool baseAsked = false;
    // The thread's own shares: a re-join below may replace the trainer or
    // theta_v of the agent, never these.
    TrainingThread thread(run,
        [run, trainer, theta = std::move(theta), source = std::move(source), steps, firstGlobalStep,
            betweenSteps = m_options.betweenSteps]() mutable {
            return trainer->run(theta->values, std::move(source), steps, firstGlobalStep, run->abort, run->wrapUp,
                [&](const engine::StepReport& report) {
                    run->steps.store(uint64_t(report.step));
                    run->lastLoss.store(report.loss);
                    run->tokensPerSecond.store(report.tokensPerSecond);
                    if (betweenSteps)
                        betweenSteps(report.stepMs, run->abort);
                });
        });
    if (hooks.whileTraining) {
        hooks.whileTraining();
        m_reporter.setPhase("training");
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
        if (m_trainer != trainer && !run->abort.load()) {
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
    summary.deviceName = trainer->deviceName();
    summary.parallelMode = trainer->parallelMode();
    if (m_trainer != trainer)
        return Error::make(net::errc::kCancelled, "the project changed its model or inner settings during the task");
    return outcome;
}

} // namespace crowdtrain::volunteer
