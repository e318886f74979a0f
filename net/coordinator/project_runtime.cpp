#include "net/coordinator/project_runtime.h"

#include "core/clock.h"
#include "core/slow_work.h"
#include "core/thread_name.h"
#include "engine/hf_gpt2.h"
#include "engine/model_io.h"
#include "net/transfer/sha256.h"
#include "net/transport/pirate.h"
#include "net/wire/error_codes.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string_view>

namespace crowdtrain::coordinator {
ProjectRuntime::ProjectRuntime(ProjectSpec spec, RuntimeOptions options)
    : m_spec(std::move(spec))
    , m_options(std::move(options))
{
    // Within what the join reply may carry (net/wire/limits.h), so that the
    // liveness rule applied here is the one announced.
    m_options.heartbeatIntervalMs
        = std::clamp(m_options.heartbeatIntervalMs, net::kMinHeartbeatIntervalMs, net::kMaxHeartbeatIntervalMs);
    m_options.heartbeatLiveness
        = std::clamp(m_options.heartbeatLiveness, net::kMinHeartbeatLiveness, net::kMaxHeartbeatLiveness);
    m_options.retryAfterMs = std::min(m_options.retryAfterMs, net::kMaxDelayMs);
    m_sessions = std::make_unique<Sessions>(m_options.heartbeatIntervalMs, m_options.heartbeatLiveness);
}

ProjectRuntime::~ProjectRuntime()
{
    // The threads use the collaborators: join them before those go.
    if (m_closing)
        m_closing->wait();
    if (m_evaluation)
        (void)m_evaluation->finish(true);
    if (m_removing.valid())
        m_removing.wait();
}

Result<std::unique_ptr<ProjectRuntime>> ProjectRuntime::open(
    ProjectSpec spec, const std::filesystem::path& stateDir, RuntimeOptions options, int64_t nowMs)
{
    std::unique_ptr<ProjectRuntime> runtime(new ProjectRuntime(std::move(spec), std::move(options)));
    try {
        if (Status s = runtime->initialise(stateDir, nowMs); !s)
            return s.error();
    } catch (const c10::Error& e) {
        return Error::make(net::errc::kProjectFailed, runtime->name() + ": " + e.what_without_backtrace());
    } catch (const std::exception& e) { // a damaged pending record, say
        return Error::make(net::errc::kProjectFailed, runtime->name() + ": " + e.what());
    }
    return runtime;
}

Status ProjectRuntime::initialise(const std::filesystem::path& stateDir, int64_t nowMs)
{
    auto data = engine::openDataSet(m_spec.dataDir);
    if (!data)
        return data.error();
    m_data = std::move(*data);
    auto store = ProjectStore::open(m_spec, stateDir);
    if (!store)
        return store.error();
    m_store = std::move(*store);
    m_store->setDeferPruning(true); // the close's evaluation thread removes what a commit no longer keeps
    auto checkpoints = CheckpointStore::open(stateDir / "checkpoints", m_spec.checkpoints);
    if (!checkpoints)
        return checkpoints.error();
    m_checkpoints = std::move(*checkpoints);

    engine::Gpt model = diloco::seededModel(m_spec.model, m_spec.init.seed);
    const bool fresh = !m_store->lastRound();
    std::vector<float> theta0; // the seeded weights, kept for a fresh project's version 0
    if (!m_spec.init.importDir) {
        theta0 = diloco::flatten(model);
        m_seedInit = net::SeedInit{m_spec.init.seed, parametersSha256Hex(theta0)};
        if (!fresh)
            theta0 = std::vector<float>(); // the saved state is loaded below: free 4P first
    }
    const diloco::Manifest manifest = diloco::manifestOf(model);
    m_parameters = manifest.totalElements;
    for (const auto& entry : manifest.entries)
        m_wireManifest.push_back({entry.name, std::vector<uint64_t>(entry.shape.begin(), entry.shape.end())});
    m_manifestSha = net::sha256Hex(net::manifestText(m_wireManifest));
    if (m_spec.codec == diloco::Codec::Sparse) {
        auto layout = diloco::SparseLayout::make(manifest, m_spec.sparse);
        if (!layout)
            return layout.error();
        m_sparseLayout = std::move(*layout);
    }
    m_evaluation = std::make_unique<Evaluation>(m_spec, *m_data, model, m_options.faultPoint);
    m_round = std::make_unique<RoundState>(m_spec, *m_store, m_parameters, m_sparseLayout);

    std::string gateRecord;
    if (fresh) {
        if (m_spec.init.importDir) {
            auto imported = engine::importHuggingFaceGpt2(*m_spec.init.importDir);
            if (!imported)
                return imported.error();
            if (Status s = engine::loadParameters(model, imported->parameters); !s)
                return s;
            theta0 = diloco::flatten(model);
        }
        const std::optional<double> valLoss = m_evaluation->evaluate(theta0);
        if (Status s = m_round->createVersionZero(std::move(theta0), valLoss, nowMs); !s)
            return s;
    } else {
        auto loaded = m_round->load();
        if (!loaded)
            return loaded.error();
        gateRecord = std::move(*loaded);
    }
    auto plan = m_store->restoreDataPlan(*m_data);
    if (!plan)
        return plan.error();
    m_plan = std::move(*plan);
    std::function<void()> beforeRecord;
    if (m_options.faultPoint) // on the board's thread: no round number to read there
        beforeRecord = [point = m_options.faultPoint] { point("task-record", -1); };
    m_tasks = std::make_unique<TaskBoard>(*m_store, *m_plan,
        uint64_t(m_spec.inner.steps * m_spec.inner.batchSize * m_spec.model.blockSize), std::move(beforeRecord));
    // Holders hear of a wrap-up at their next heartbeat and stop after the
    // step they are in: two liveness periods are enough to start uploading
    // when a step is short (RoundPolicy waits longer for a slow step).
    const int64_t livenessMs = int64_t(2 * m_options.heartbeatIntervalMs * m_options.heartbeatLiveness);
    m_policy = std::make_unique<RoundPolicy>(m_spec, *m_round, *m_tasks, *m_plan, livenessMs);
    m_submissions = std::make_unique<Submissions>(m_spec, m_spec.codec, m_parameters,
        m_sparseLayout ? &*m_sparseLayout : nullptr, *m_store, *m_plan, *m_tasks, *m_round, *m_worker,
        [this](uint64_t taskId) { m_policy->endTask(taskId, true); });
    m_submissions->setFaultPoint(m_options.faultPoint);
    if (m_spec.trust.defences && m_spec.trust.newKeyShare < 1)
        m_policy->setNewKeys([this](const std::string& key) { return !m_submissions->trust().established(key); });
    m_queries = std::make_unique<ProjectQueries>(*m_store, *m_checkpoints);
    m_downloads = std::make_unique<Downloads>(Downloads::Parts{m_spec, *m_store, *m_checkpoints, *m_queries, *m_round,
        *m_tasks, *m_data, m_options.swarm, m_parameters, livenessMs});
    if (Status s = m_submissions->open(gateRecord); !s)
        return Error::make(s.error().code, m_store->lastRound()->stateFile + ": " + s.error().message);
    if (Status s = m_tasks->open(); !s)
        return s;
    if (Status s = m_downloads->publish(); !s)
        return s;
    if (Status s = m_downloads->publishTokenizer(); !s)
        return s;
    if (Status s = m_submissions->replayPending(); !s)
        return s;
    if (Status s
        = m_tasks->restore(m_round->openRound(), [this](OpenTask& task) { return m_submissions->resumeUpload(task); });
        !s)
        return s;
    // Their holders are reconnecting with backoff, up to kReconnectMaxMs.
    m_policy->restored(core::unixNowMs(), int64_t(net::kReconnectMaxMs));
    if (!fresh)
        resumeEvaluation();
    return Status::success();
}

net::ProjectInfo ProjectRuntime::info() const
{
    net::ProjectInfo info;
    info.name = m_spec.name;
    info.description = m_spec.description;
    info.model = {uint64_t(m_spec.model.nLayer), uint64_t(m_spec.model.nHead), uint64_t(m_spec.model.nEmbd),
        uint64_t(m_spec.model.blockSize), uint64_t(m_spec.model.vocabSize)};
    info.codec = std::string(diloco::codecName(m_spec.codec));
    info.round = uint64_t(m_round->openRound());
    info.version = uint64_t(m_round->version());
    info.tokensTrained = uint64_t(m_round->totalTokens());
    info.volunteersOnline = m_sessions->online();
    info.valLoss = m_round->lastValLoss();
    info.parameters = uint64_t(m_parameters);
    info.tokenGoal = m_spec.tokenGoal;
    info.license = m_spec.license;
    info.checkpointAccess = std::string(checkpointAccessName(m_spec.checkpointAccess));
    if (auto list = m_checkpoints->list(); list && !list->empty())
        info.newestCheckpoint = uint64_t(list->back().round);
    info.tokenizer = m_downloads->tokenizerFiles();
    return info;
}

namespace {

// A rejection that judged the payload itself (not a stale or unknown task).
bool isVerdictOnPayload(std::string_view code)
{
    return code == net::errc::kNormOutOfBounds || code == net::errc::kDirectionOutOfBounds
        || code == net::errc::kLossOutOfBounds || code == net::errc::kNonFinite || code == net::errc::kBadShape
        || code == net::errc::kBadTokens || code == net::errc::kChecksumMismatch
        || code == net::errc::kDuplicatePayload;
}

} // namespace

Result<net::JoinReply> ProjectRuntime::join(const std::string& key, const net::JoinRequest& request, int64_t nowMs)
{
    if (Status s = m_store->ledger().upsertVolunteer(key, request.displayName, request.device, nowMs); !s)
        return s.error();
    net::JoinReply reply;
    reply.session = m_sessions->join(key, request.displayName, nowMs);
    reply.project = info();
    reply.manifest = m_wireManifest;
    reply.manifestSha256 = m_manifestSha;
    reply.version = uint64_t(m_round->version());
    reply.stateResource = stateResourceName(m_round->version());
    reply.stateSha256 = m_round->paramsSha();
    reply.stateBytes = uint64_t(m_parameters) * 4;
    reply.stateTorrent = m_downloads->torrentOf(reply.stateResource);
    reply.chunkBytes = net::kDefaultChunkBytes;
    reply.codec = std::string(diloco::codecName(m_spec.codec));
    if (m_sparseLayout)
        reply.sparse = net::SparseSettings{uint64_t(m_spec.sparse.chunk), uint64_t(m_spec.sparse.k),
            m_spec.sparse.decay, uint64_t(m_spec.sparse.updateBits)};
    const InnerSpec& in = m_spec.inner;
    reply.inner = {uint64_t(in.steps), uint64_t(in.batchSize), uint64_t(m_spec.model.blockSize), in.learningRate,
        in.minLr, uint64_t(in.warmupIters), uint64_t(in.lrDecayIters), in.beta1, in.beta2, in.weightDecay, in.gradClip};
    reply.heartbeatIntervalMs = m_options.heartbeatIntervalMs;
    reply.heartbeatLiveness = m_options.heartbeatLiveness;
    reply.eventsPort = m_options.eventsPort;
    reply.init = m_seedInit;
    return reply;
}

Result<net::HeartbeatReply> ProjectRuntime::heartbeat(const std::string& key, const net::HeartbeatRequest& request)
{
    if (Status s = m_sessions->check(key, request.session, m_spec.name); !s)
        return s.error();
    const bool working = m_tasks->heldBy(key) != nullptr;
    if (!working)
        m_policy->waitsForWork(key, core::unixNowMs());
    const int64_t version = m_round->version();
    return net::HeartbeatReply{uint64_t(version), uint64_t(version + 1),
        std::string(working || m_policy->offersWork(key) ? net::kStateTrain : net::kStateWait),
        working && m_policy->wrappingUp()};
}

Result<net::LeaveReply> ProjectRuntime::leave(const std::string& key, const net::LeaveRequest& request)
{
    if (Status s = m_sessions->leave(key, request.session, m_spec.name); !s)
        return s.error();
    m_policy->endTasksOf(key);
    return net::LeaveReply{};
}

net::Task ProjectRuntime::wireTask(const OpenTask& task, int64_t nowMs) const
{
    const int64_t version = m_round->version();
    net::Task wire;
    wire.taskId = task.lease.id;
    wire.round = uint64_t(version + (task.ahead ? 2 : 1));
    wire.version = uint64_t(version + (task.ahead ? 1 : 0));
    for (const Piece& piece : task.lease.pieces)
        wire.shards.push_back({m_data->train[piece.shard].path().filename().string(), piece.begin, piece.end});
    wire.innerSteps = uint64_t(m_spec.inner.steps);
    // At least 1 (the wire's minimum): a lease past its deadline is only
    // expired at the next tick.
    wire.deadlineMs = uint64_t(std::max<int64_t>(1, task.lease.deadlineMs - nowMs));
    return wire;
}

namespace {

Error staleVersion(uint64_t held, int64_t version)
{
    return Error::make(net::errc::kStaleVersion,
        "you hold version " + std::to_string(held) + ", the project is at " + std::to_string(version)
            + ": get_update first");
}

} // namespace

void ProjectRuntime::getTask(
    const std::string& key, const net::GetTaskRequest& request, int64_t nowMs, GetTaskDone done)
{
    if (Status s = m_sessions->check(key, request.session, m_spec.name); !s)
        return done(s.error());
    if (int64_t(request.version) != m_round->version())
        return done(staleVersion(request.version, m_round->version()));
    auto task = m_policy->handOut(key, request.ahead, nowMs);
    if (!task)
        return done(task.error());
    if (!*task)
        return done(net::GetTaskReply{std::nullopt, m_options.retryAfterMs});
    // A task asked for again while its record is written waits for the same write.
    m_recordingTasks.push_back({(*task)->lease.id, key, request.version, std::move(done)});
    collectRecords(false, nowMs);
}

void ProjectRuntime::collectRecords(bool wait, int64_t nowMs)
{
    std::vector<RecordingTask> still;
    for (RecordingTask& r : std::exchange(m_recordingTasks, {})) {
        const OpenTask* task = m_tasks->find(r.taskId, r.key);
        if (task && task->recorded.valid() && !wait
            && task->recorded.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
            still.push_back(std::move(r));
            continue;
        }
        if (Status recorded = m_tasks->settleRecord(r.taskId); !recorded) {
            m_policy->endTask(r.taskId, true);
            r.done(recorded.error());
        } else if (int64_t(r.version) != m_round->version()) {
            r.done(staleVersion(r.version, m_round->version()));
        } else if (task) {
            r.done(net::GetTaskReply{wireTask(*task, nowMs), 0});
        } else { // ended meanwhile
            r.done(net::GetTaskReply{std::nullopt, m_options.retryAfterMs});
        }
    }
    // A done() above may have asked for more (it only sends a reply today).
    for (RecordingTask& r : m_recordingTasks)
        still.push_back(std::move(r));
    m_recordingTasks = std::move(still);
}

Result<net::UploadChunkReply> ProjectRuntime::uploadChunk(
    const std::string& key, const net::UploadChunkRequest& request, int64_t nowMs)
{
    if (Status s = m_sessions->check(key, request.session, m_spec.name); !s)
        return s.error();
    return m_submissions->uploadChunk(key, request, nowMs);
}

void ProjectRuntime::submit(
    const std::string& key, const net::SubmitRequest& request, int64_t nowMs, Submissions::SubmitDone done)
{
    if (Status s = m_sessions->check(key, request.session, m_spec.name); !s)
        return done(s.error());
    if (m_round->closing()) {
        m_waitingSubmits.push_back({key, request, nowMs, std::move(done)});
        return;
    }
    m_submissions->submit(key, request, nowMs, [this, key, done = std::move(done)](Result<net::SubmitReply> reply) {
        if (!reply && isVerdictOnPayload(reply.error().code))
            m_policy->payloadRejected(key);
        done(std::move(reply));
    });
}

PublishedEvents ProjectRuntime::tick(int64_t nowMs)
{
    if (m_options.faultPoint)
        m_options.faultPoint("tick", m_round->openRound());
    PublishedEvents events;
    {
        const core::SlowWork slow("publishing a round's close");
        collectClose(false, events);
    }
    {
        const core::SlowWork slow("answering accepted submissions");
        m_submissions->collectAccepted(false);
        if (!m_round->closing())
            for (WaitingSubmit& w : std::exchange(m_waitingSubmits, {}))
                submit(w.key, w.request, w.nowMs, std::move(w.done));
    }
    {
        const core::SlowWork slow("handing out recorded tasks");
        collectRecords(false, nowMs);
    }
    {
        const core::SlowWork slow("the evaluation's results");
        finishEvaluation(false, events);
    }
    {
        const core::SlowWork slow("the downloads' tick");
        m_downloads->tick(nowMs);
    }
    removeReleasedFiles();
    for (const std::string& gone : m_sessions->expire(nowMs))
        m_policy->endTasksOf(gone);
    for (uint64_t expired : m_tasks->expire(nowMs))
        m_policy->endTask(expired, false); // the plan took the range back itself
    if (std::optional<net::RoundWrapUpEvent> wrapUp = m_policy->tick(nowMs))
        events.frames.push_back(net::encodeEvent(m_spec.name, *wrapUp));
    // One close at a time, its evaluation included (the model is the
    // evaluation's): a round due meanwhile waits, the loop does not.
    if (closeDue() && !m_submissions->accepting()) {
        const core::SlowWork slow("beginning a round's close");
        beginClose(nowMs);
    }
    return events;
}

void ProjectRuntime::removeReleasedFiles()
{
    if (m_removing.valid() && m_removing.wait_for(std::chrono::seconds(0)) != std::future_status::ready)
        return;
    std::vector<std::filesystem::path> files = m_store->takeUnreferenced();
    if (files.empty())
        return;
    m_removing = std::async(std::launch::async, [files = std::move(files), name = m_spec.name] {
        core::nameThisThread("remove-files");
        if (Status s = ProjectStore::removeFiles(files); !s) // only costs disk
            std::fprintf(stderr, "%s: %s\n", name.c_str(), s.error().message.c_str());
    });
}

} // namespace crowdtrain::coordinator
