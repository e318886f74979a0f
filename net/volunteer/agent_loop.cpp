#include "net/volunteer/agent_loop.h"

#include "core/file_io.h"
#include "crowdtrain/version.h"
#include "net/transfer/sha256.h"
#include "net/volunteer/core_host.h"
#include "net/volunteer/theta_update.h"
#include "net/wire/error_codes.h"

#include <nlohmann/json.hpp>
#include <thread>

namespace crowdtrain::volunteer {
namespace {

// Errors of this machine's set-up: retrying cannot fix them.
// A full disk is not (a state or an update that does not fit the data
// folder): retried with the backoff, the error in the log and the status,
// until space returns.
bool isFatal(const Error& error)
{
    return net::isFatalForVolunteer(error.code) && !core::isDiskFull(error);
}

} // namespace

std::string volunteerWords(const std::string& displayName, const std::string& publicKey)
{
    if (!displayName.empty())
        return displayName;
    return "anonymous volunteer " + net::anonymousTag(publicKey);
}

std::string AgentSummary::toJson() const
{
    const nlohmann::json json = {
        {"tasks", tasks},
        {"accepted", accepted},
        {"rejected", rejected},
        {"dropped", dropped},
        {"unconfirmed", unconfirmed},
        {"tokens", tokens},
        {"compute_s", computeMs / 1e3},
        {"wall_s", wallMs / 1e3},
        {"first_task_s", firstTaskMs / 1e3},
        {"utilisation", utilisation()},
        {"bytes_sent", bytesSent},
        {"bytes_received", bytesReceived},
        {"version", version},
        {"reconnects", reconnects},
        {"requests", requests},
        {"heartbeats", heartbeats},
        {"data_requests", dataRequests},
        {"data_fetches", pieceFetches},
        {"device", deviceName},
        {"parallel_mode", parallelMode},
        {"memory_plan", memoryPlan},
        {"micro_batch", microBatch},
    };
    return json.dump();
}

VolunteerAgent::VolunteerAgent(AgentOptions options)
    : m_options(std::move(options))
    , m_core(std::make_unique<CoreHost>(
          CoreHostOptions{
              .cpuCore = m_options.coreBinary, .cudaCore = m_options.cudaCoreBinary, .tryCuda = m_options.tryCudaCore},
          m_options.log))
{ }

VolunteerAgent::~VolunteerAgent() = default;

void VolunteerAgent::releaseCore(const std::string& why)
{
    m_core->release(why);
}

bool VolunteerAgent::coreRunning() const
{
    return m_core->running();
}

uint64_t VolunteerAgent::coreStarts() const
{
    return m_core->starts();
}

Status VolunteerAgent::run()
{
    AgentLoop loop(*this, m_options);
    return loop.run();
}

AgentSummary VolunteerAgent::summary() const
{
    std::lock_guard lock(m_summaryMutex);
    return m_summary;
}

void VolunteerAgent::publish(const AgentSummary& summary)
{
    {
        std::lock_guard lock(m_summaryMutex);
        m_summary = summary;
    }
    if (m_options.published)
        m_options.published(summary);
}

AgentLoop::AgentLoop(VolunteerAgent& agent, const AgentOptions& options)
    : m_options(options)
    , m_core(*agent.m_core)
    , m_stop(agent.m_stop)
    , m_reporter(agent, options.log)
    , m_context(1)
{ }

AgentLoop::~AgentLoop()
{
    // Every socket closes before the context terminates (which waits for them).
    m_uploader.reset();
    m_runner.reset();
    m_theta.reset();
    m_shards.reset();
    m_session.reset();
    m_context.close();
}

void AgentLoop::sleepUntil(Clock::time_point until, const std::function<void()>& eachTick)
{
    while (!stopping() && Clock::now() < until) {
        if (eachTick)
            eachTick();
        std::this_thread::sleep_for(std::min<Clock::duration>(std::chrono::milliseconds(50), until - Clock::now()));
    }
}

Status AgentLoop::prepare()
{
    std::filesystem::path dataDir = m_options.dataDir;
    if (dataDir.empty()) {
        auto dir = defaultDataDir();
        if (!dir)
            return dir.error();
        dataDir = *dir;
    }
    std::error_code ec;
    std::filesystem::create_directories(dataDir, ec);
    if (ec)
        return Error::make(
            net::errc::kIoError, "cannot create the data folder " + dataDir.string() + ": " + ec.message());
    auto keys = net::loadOrCreateKeyPair(identityKeyFile(dataDir));
    if (!keys)
        return keys.error();
    auto serverKey = resolveServerKey(m_options.serverKey);
    if (!serverKey)
        return serverKey.error();
    auto folder = ProjectFolder::open(dataDir, m_options.project);
    if (!folder)
        return folder.error();
    auto lock = core::FolderLock::acquire(folder->dir());
    if (!lock)
        return lock.error();
    m_folderLock = std::move(*lock);
    m_folder = std::move(*folder);

    SessionOptions session;
    session.endpoint = m_options.endpoint;
    session.serverKey = *serverKey;
    session.project = m_options.project;
    session.displayName = m_options.displayName;
    session.device = !m_options.deviceLabel.empty() ? m_options.deviceLabel
        : m_options.device == "cpu"                 ? std::string("CPU")
                                                    : m_options.device;
    session.throttle = m_options.network;
    session.clientVersion
        = m_options.clientVersion.empty() ? std::string("crowdtrain-worker ") + kVersion : m_options.clientVersion;
    m_session = std::make_unique<Session>(m_context, *keys, std::move(session), m_stop, m_reporter,
        [this](const net::JoinReply& reply) { return checkJoin(reply); });
    StateSwarmOptions stateSwarm;
    stateSwarm.session = m_options.swarm;
    stateSwarm.seeding = m_options.swarmSeeding;
    m_stateSwarm = std::make_unique<StateSwarm>(*m_session, *m_folder, m_reporter, std::move(stateSwarm));
    m_theta = std::make_unique<ThetaSync>(*m_session, *m_folder, m_reporter, m_stop, m_stateSwarm.get(), &m_core);
    m_runner
        = std::make_unique<TaskRunner>(m_options, m_core, m_folder->dir() / "core", *m_session, m_reporter, m_stop);
    m_uploader = std::make_unique<Uploader>(*m_session, *m_folder, m_reporter, m_stop, m_options.alterPseudoGradient);
    m_reporter.setFill([this](AgentSummary& summary) {
        summary.wallMs = std::chrono::duration<double, std::milli>(Clock::now() - m_started).count();
        summary.bytesSent = m_session->traffic().bytesSent;
        summary.bytesReceived = m_session->traffic().bytesReceived;
        summary.version = m_theta->version();
        summary.reconnects = m_session->reconnects();
        summary.requests = m_session->traffic().requests;
        summary.heartbeats = m_session->traffic().heartbeats;
        const corelink::CoreHello core = m_core.hello();
        summary.coreFamily = core.family;
        summary.coreRuntime = core.runtime;
        summary.coreRunning = m_core.running();
        summary.cudaRefusal = m_core.cudaRefusal();
        if (auto* pieces = dynamic_cast<PieceLibrary*>(m_shards.get())) {
            summary.pieceFetches = pieces->fetched();
            summary.dataRequests = pieces->requests();
        }
    });

    if (m_options.preparedDataDir.empty()) {
        // The coordinator serves each task's data (docs/protocol.md, "Data pieces").
        m_shards = std::make_unique<PieceLibrary>(
            m_folder->dir() / "pieces", m_options.pieceCacheBytes,
            [this]() -> std::unique_ptr<net::ResourceSource> { return m_session->resources(); }, &m_stop);
    } else {
        if (!std::filesystem::is_directory(m_options.preparedDataDir, ec))
            return Error::make(net::errc::kMissingShard,
                "the project's prepared data folder '" + m_options.preparedDataDir.string() + "' does not exist");
        m_shards = std::make_unique<ShardLibrary>(m_options.preparedDataDir);
    }
    m_reporter.log("joining as %s (data folder %s)", volunteerWords(m_options.displayName, keys->publicKey).c_str(),
        dataDir.string().c_str());
    return Status::success();
}

Status AgentLoop::run()
{
    m_started = Clock::now();
    if (Status prepared = prepare(); !prepared)
        return prepared;
    Status result = Status::success();
    while (!stopping() && !limitsReached()) {
        if (!m_session->joined()) {
            m_reporter.setPhase(m_session->everJoined() ? AgentPhase::Offline : AgentPhase::Connecting);
            sleepUntil(m_session->nextAttempt());
            if (stopping())
                break;
            Status joined = m_session->rejoinWhenDue();
            if (!joined) {
                const Error& error = joined.error();
                if (error.code == net::errc::kCancelled && stopping())
                    break;
                if (isFatal(error) || (!m_session->everJoined() && !isConnectionError(error))) {
                    result = joined;
                    break;
                }
                m_reporter.summary().lastError = error.message;
                m_reporter.setPhase(AgentPhase::Offline);
                continue;
            }
        }
        Status step = cycle();
        m_reporter.publish();
        if (step)
            continue;
        const Error& error = step.error();
        if (isFatal(error)) {
            result = step;
            break;
        }
        if (error.code == net::errc::kCancelled && stopping())
            break;
        if (isConnectionError(error)) {
            m_session->disconnect(error.message);
            continue;
        }
        if (error.code == net::errc::kNotJoined) {
            m_session->forget();
            continue;
        }
        // The server said no to something unexpected, or the training core
        // failed: log it, wait, carry on (a core fault keeps the session: the
        // next task starts a new core).
        const uint64_t delayMs = m_session->backoff().nextDelayMs();
        m_reporter.summary().lastError = error.message;
        m_reporter.log("%s (%s); retrying in %.1f s", error.message.c_str(), error.code.c_str(), double(delayMs) / 1e3);
        const bool coreFault = error.code == net::errc::kCoreFailed || error.code == net::errc::kCoreHung;
        if (!coreFault)
            m_session->forget();
        // A kept session heartbeats through the wait, or the coordinator
        // would drop it before the next core starts.
        const bool kept = coreFault && m_session->joined();
        sleepUntil(Clock::now() + std::chrono::milliseconds(delayMs), [&] {
            if (kept)
                (void)m_session->keepAlive(m_theta->version());
        });
    }
    // A task trained before a limit was reached still goes in.
    if (m_uploader && m_uploader->pending() && !stopping() && m_session->joined())
        if (Status submitted = m_uploader->submit(); !submitted)
            m_reporter.log("the last task was not submitted: %s", submitted.error().message.c_str());
    m_session->leave();
    m_reporter.summary().phase = AgentPhase::Stopped;
    m_reporter.publish();
    return result;
}

Status AgentLoop::checkJoin(const net::JoinReply& reply)
{
    if (reply.project.name != m_options.project)
        return Error::make(
            net::errc::kMalformed, "joined project '" + reply.project.name + "', asked for " + m_options.project);
    auto codec = diloco::parseCodec(reply.codec);
    if (!codec)
        return Error::make(
            net::errc::kBadCodec, "the project's codec '" + reply.codec + "' is not one this worker knows");
    const engine::GptConfig model = corelink::gptConfigOf(reply.project.model);
    if (Status valid = engine::validate(model); !valid)
        return Error::make(
            net::errc::kManifestMismatch, "the project's model cannot be built: " + valid.error().message);
    if (reply.inner.steps == 0 || reply.inner.batchSize == 0 || reply.inner.blockSize != reply.project.model.blockSize)
        return Error::make(
            net::errc::kBadOptions, "the project's inner settings are not usable (steps, batch, block size)");
    if (m_checkedManifest.empty() || !(model == m_model)) {
        // The layout this worker's core builds, against the coordinator's.
        m_checkedManifest = wireManifestOf(model);
    }
    if (m_checkedManifest != reply.manifest)
        return Error::make(net::errc::kManifestMismatch,
            "the coordinator's parameter manifest differs from this worker's model (" + reply.manifestSha256
                + "); update crowdtrain-worker");
    const uint64_t elements = net::manifestElements(reply.manifest);
    if (reply.stateBytes != elements * 4)
        return Error::make(net::errc::kMalformed, "the state's size does not match the manifest");
    std::optional<diloco::SparseLayout> sparse;
    if (*codec == diloco::Codec::Sparse) {
        auto layout = sparseLayoutOf(reply);
        if (!layout)
            return Error::make(net::errc::kBadCodec, "the project's sparse codec: " + layout.error().message);
        sparse = std::move(*layout);
    }
    if (!(model == m_model))
        m_theta->reset();
    m_model = model;
    m_theta->setModel(model, elements);
    m_runner->configure(model, reply.inner);
    m_uploader->configure(*codec, elements, reply.manifestSha256, std::move(sparse));
    return Status::success();
}

Status AgentLoop::cycle()
{
    // With a task leased ahead, the last one uploads while it trains.
    if (m_uploader->pending() && !m_aheadTask) {
        if (Status submitted = m_uploader->submit(); !submitted)
            return submitted;
        if (limitsReached())
            return Status::success();
    }
    if (!m_theta->current() || m_theta->version() != m_session->serverVersion()) {
        m_reporter.setPhase(AgentPhase::Syncing);
        if (Status synced = m_theta->sync(); !synced)
            return synced;
    } else {
        m_theta->followSeeding();
    }
    if (!m_startVersion)
        m_startVersion = m_theta->version();
    if (limitsReached() || stopping())
        return Status::success();
    if (m_options.beforeTask) {
        m_options.beforeTask();
        if (stopping())
            return Status::success();
    }
    std::optional<net::Task> task;
    if (m_aheadTask && m_aheadTask->version >= m_theta->version())
        task = std::move(m_aheadTask);
    m_aheadTask.reset();
    // An ahead task whose round has opened is the coordinator's normal task
    // by now: asking again returns it with its version.
    if (!task)
        if (Status obtained = obtainTask(task); !obtained)
            return obtained;
    if (!task)
        return Status::success();
    return trainTask(*task);
}

bool AgentLoop::wantsAheadTask() const
{
    // The task in hand counts once it is submitted.
    const bool moreWanted = m_options.maxTasks == 0 || m_reporter.summary().tasks + 1 < m_options.maxTasks;
    return m_options.overlap && moreWanted && !limitsReached();
}

// While a task trains: the next one leased ahead, and its data fetched, so
// that it starts the moment this one ends.
void AgentLoop::leaseAheadEarly()
{
    if (!wantsAheadTask() || m_aheadTask)
        return;
    obtainAheadTask();
    if (!m_aheadTask)
        return;
    if (Status fetched = m_shards->prefetchTask(m_aheadTask->taskId, m_aheadTask->shards); !fetched)
        m_reporter.log("task %llu: its data will be fetched when it starts (%s)",
            static_cast<unsigned long long>(m_aheadTask->taskId), fetched.error().message.c_str());
}

void AgentLoop::obtainAheadTask()
{
    net::GetTaskRequest request{m_options.project, m_session->joinReply().session, m_theta->version(), true};
    auto reply = m_session->call<net::GetTaskReply>(request, m_session->transferTimeoutMs());
    if (reply && reply->task && reply->task->version == m_theta->version() + 1)
        m_aheadTask = std::move(reply->task);
}

void AgentLoop::syncWhileTraining()
{
    if (Status synced = m_theta->sync(); !synced)
        m_reporter.log("could not update theta while training: %s", synced.error().message.c_str());
}

Status AgentLoop::waitForBase(const net::Task& task)
{
    m_reporter.setPhase(AgentPhase::Waiting);
    while (!stopping() && m_session->serverVersion() < task.version) {
        // Asking for the task again says "done, waiting": the round may wrap up.
        net::GetTaskRequest request{m_options.project, m_session->joinReply().session, m_theta->version(), true};
        auto reply = m_session->call<net::GetTaskReply>(request, m_session->transferTimeoutMs());
        if (!reply)
            return reply.error();
        if (!reply->task || reply->task->taskId != task.taskId)
            return Error::make(net::errc::kUnknownTask, "the coordinator took the task back for the open round's work");
        if (Status waited = waitForWork(m_session->intervalMs()); !waited)
            return waited;
    }
    if (stopping())
        return Error::make(net::errc::kCancelled, "stopped while waiting for the round");
    if (m_theta->version() < m_session->serverVersion())
        return m_theta->sync();
    return Status::success();
}

Status AgentLoop::obtainTask(std::optional<net::Task>& task)
{
    const uint64_t version = m_theta->version();
    net::GetTaskRequest request{m_options.project, m_session->joinReply().session, version};
    auto reply = m_session->call<net::GetTaskReply>(request, m_session->transferTimeoutMs());
    if (!reply) {
        if (reply.error().code == net::errc::kStaleVersion) {
            // The round closed: learn the new version, then sync.
            auto beat = m_session->beat(version);
            return beat ? Status::success() : Status(beat.error());
        }
        return reply.error();
    }
    if (!reply->task)
        return waitForWork(reply->retryAfterMs);
    if (reply->task->version != version) {
        m_session->noteServerVersion(reply->task->version);
        return Status::success();
    }
    task = std::move(reply->task);
    return Status::success();
}

Status AgentLoop::trainTask(const net::Task& task)
{
    const net::InnerSettings& inner = m_session->joinReply().inner;
    const uint64_t steps = task.innerSteps > 0 ? task.innerSteps : inner.steps;
    m_shards->clear();
    if (Status prepared = m_shards->prepareTask(task.taskId, task.shards); !prepared)
        return prepared;
    auto source = RangeBatchSource::create(*m_shards, task.shards, m_model.blockSize, m_model.vocabSize,
        int64_t(inner.batchSize), steps * inner.batchSize);
    if (!source)
        return source.error();
    m_reporter.log("task %llu: round %llu from version %llu, %llu steps on %s [%llu, %llu)",
        static_cast<unsigned long long>(task.taskId), static_cast<unsigned long long>(task.round),
        static_cast<unsigned long long>(task.version), static_cast<unsigned long long>(steps),
        task.shards.empty() ? "?" : task.shards.front().shard.c_str(),
        static_cast<unsigned long long>(task.shards.empty() ? 0 : task.shards.front().beginToken),
        static_cast<unsigned long long>(task.shards.empty() ? 0 : task.shards.front().endToken));

    // A task leased ahead starts from where the last one ended (a guess at
    // the coming version); its progress is moved onto the true version after.
    // Starting from theta_v, or from theta_v plus the last outer update, was
    // tried: the direction gate refused more of those tasks.
    std::shared_ptr<const Theta> theta = m_theta->current();
    if (m_aheadStart && task.version > theta->version && m_aheadStart->version == theta->version) {
        theta = m_aheadStart;
        m_reporter.log("task %llu: leased ahead; training from the last task's weights while round %llu closes",
            static_cast<unsigned long long>(task.taskId), static_cast<unsigned long long>(task.round - 1));
    }
    m_aheadStart.reset();
    // While the core trains, theta_v need not be in RAM: the core has its
    // copy, and Delta reads it back from its file (with overlap, a task
    // leased ahead moves weights in RAM, so it stays).
    if (!m_options.overlap && theta == m_theta->current()) {
        auto spilled = m_theta->spill();
        if (!spilled)
            return spilled.error();
        theta = std::move(*spilled);
    }
    const auto started = Clock::now();
    if (m_reporter.summary().firstTaskMs == 0)
        m_reporter.summary().firstTaskMs = std::chrono::duration<double, std::milli>(started - m_started).count();
    RunHooks hooks;
    const bool leasedAhead = task.version > m_theta->version();
    hooks.whileTraining = [this, leasedAhead] {
        if (m_uploader->pending())
            if (Status submitted = m_uploader->submit(); !submitted)
                m_reporter.log("the last task's upload waits: %s", submitted.error().message.c_str());
        if (!leasedAhead) // (one leased ahead asks once its round has opened)
            leaseAheadEarly();
    };
    hooks.baseIsOut = [this] {
        syncWhileTraining();
        leaseAheadEarly();
    };
    auto outcome = m_runner->run(task, theta, std::move(*source), hooks);
    const double wallMs = std::chrono::duration<double, std::milli>(Clock::now() - started).count();
    AgentSummary& summary = m_reporter.summary();
    if (!outcome) {
        ++summary.dropped;
        if (outcome.error().code == net::errc::kCancelled)
            return stopping() ? outcome.error() : Status::success();
        if (outcome.error().code == net::errc::kNonFinite) {
            m_reporter.log("task %llu: %s; not submitted", static_cast<unsigned long long>(task.taskId),
                outcome.error().message.c_str());
            return Status::success();
        }
        return outcome.error();
    }
    summary.tokens += outcome->tokens;
    summary.computeMs += outcome->computeMs;
    if (m_uploader->pending()) // the last task's, if its upload failed while this one trained
        if (Status submitted = m_uploader->submit(); !submitted)
            return submitted;
    // With overlap, the next task leased ahead starts from these weights and
    // a task leased ahead moves them: they are read into memory (4 B/P more).
    // Otherwise they stay in the core's file, which the uploader reads a
    // chunk at a time.
    if (m_options.overlap || task.version > theta->version)
        if (Status loaded = loadLocalWeights(*outcome, m_theta->elements()); !loaded)
            return loaded;
    std::shared_ptr<const Theta> base = theta;
    if (task.version > theta->version) { // leased ahead: Delta is taken against theta of its version
        if (Status reached = waitForBase(task); !reached) {
            if (reached.error().code != net::errc::kUnknownTask)
                return reached;
            ++summary.dropped;
            m_reporter.log(
                "task %llu dropped: %s", static_cast<unsigned long long>(task.taskId), reached.error().message.c_str());
            return Status::success();
        }
        base = m_theta->current();
        if (!base || base->version != task.version) {
            ++summary.dropped;
            m_reporter.log(
                "task %llu dropped: its round closed without it", static_cast<unsigned long long>(task.taskId));
            return Status::success();
        }
        // The outer step applied one round late: the task's progress moves
        // from where it started onto the version it is for.
        for (size_t i = 0; i < outcome->local.size(); ++i)
            outcome->local[i] += base->values[i] - theta->values[i];
    }
    // Seconds at GPT-2 size (the delta, its encoding, the residual saved):
    // heartbeats go on meanwhile, or the coordinator counts us gone.
    if (Status taken = m_session->whileAlive([&] { return m_uploader->take(task, *base, *outcome); }, base->version);
        !taken)
        return taken;
    m_reporter.log("task %llu: trained %llu steps, loss %.4f (last %.4f), %.0f tok/s, %.1f s compute of %.1f s",
        static_cast<unsigned long long>(task.taskId), static_cast<unsigned long long>(outcome->steps),
        outcome->meanLoss, outcome->lastLoss,
        outcome->computeMs > 0 ? double(outcome->tokens) / (outcome->computeMs / 1e3) : 0.0, outcome->computeMs / 1e3,
        wallMs / 1e3);
    if (!m_session->joined())
        return Error::make(net::errc::kTimeout, "not connected after training");
    if (wantsAheadTask() && !m_aheadTask)
        obtainAheadTask();
    if (wantsAheadTask() && m_aheadTask) {
        m_aheadStart = std::make_shared<const Theta>(Theta{base->version, std::string(), outcome->local, {}});
        return Status::success(); // uploads while the next task trains
    }
    return m_uploader->submit();
}

Status AgentLoop::waitForWork(uint64_t retryAfterMs)
{
    // Heartbeats tell when the round closes ("version" moves) or when work
    // is available again ("train"); the server's retry hint sets the pace.
    // A version_published event ends the wait at once.
    const uint64_t pollMs = std::clamp<uint64_t>(retryAfterMs, 100, m_session->intervalMs());
    m_reporter.setPhase(AgentPhase::Waiting);
    while (!stopping()) {
        const auto until = Clock::now() + std::chrono::milliseconds(pollMs);
        if (EventListener* events = m_session->events()) {
            bool published = false;
            while (!published && !stopping() && Clock::now() < until) {
                const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
                const ProjectEvents seen = events->wait(int(std::min<int64_t>(left.count(), 50)));
                published = seen.publishedVersion && *seen.publishedVersion > m_theta->version();
            }
        } else {
            sleepUntil(until);
        }
        if (stopping())
            break;
        auto reply = m_session->beat(m_theta->version());
        if (!reply)
            return reply.error();
        if (!*reply)
            continue; // a miss, not yet a lost coordinator
        const net::HeartbeatReply& beat = **reply;
        if (!m_theta->current() || beat.version != m_theta->version() || beat.state == net::kStateTrain)
            return Status::success();
    }
    return Status::success();
}

bool AgentLoop::limitsReached() const
{
    const AgentSummary& summary = m_reporter.summary();
    if (m_options.maxTasks > 0 && summary.tasks >= m_options.maxTasks)
        return true;
    if (m_options.maxRounds > 0 && m_startVersion && m_theta && m_theta->current()
        && m_theta->version() >= *m_startVersion + m_options.maxRounds)
        return true;
    return false;
}

} // namespace crowdtrain::volunteer
