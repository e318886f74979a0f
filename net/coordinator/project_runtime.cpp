#include "net/coordinator/project_runtime.h"

#include "engine/hf_gpt2.h"
#include "engine/model_io.h"
#include "net/transfer/sha256.h"

#include <algorithm>
#include <charconv>
#include <random>

namespace crowdtrain::coordinator {
namespace {

// Lease ids are reserved in blocks: one ledger write per this many tasks.
constexpr uint64_t kLeaseIdBlock = 1024;
constexpr const char* kLeaseIdsReservedKey = "lease_ids_reserved";

std::string randomSession()
{
    static thread_local std::mt19937_64 rng{std::random_device{}()};
    char text[33];
    std::snprintf(text, sizeof text, "%016llx%016llx", static_cast<unsigned long long>(rng()),
        static_cast<unsigned long long>(rng()));
    return text;
}

diloco::Codec dilocoCodec(Codec codec)
{
    switch (codec) {
    case Codec::Fp32:
        return diloco::Codec::Fp32;
    case Codec::Fp16:
        return diloco::Codec::Fp16;
    case Codec::Int8:
        break;
    }
    return diloco::Codec::Int8;
}

std::string stateResourceName(int64_t version)
{
    return "state-v" + std::to_string(version);
}
std::string updateResourceName(int64_t version)
{
    return "update-v" + std::to_string(version);
}

// Tokens a round needs. A task trains on H * batch * block tokens (its range
// holds one more, the last target), so "one task's worth" (token_target 0)
// is that many: a submission of a whole task closes the round.
int64_t roundTarget(const ProjectSpec& spec)
{
    return spec.round.tokenTarget > 0 ? int64_t(spec.round.tokenTarget) : int64_t(spec.tokensPerTask() - 1);
}

} // namespace

ProjectRuntime::ProjectRuntime(ProjectSpec spec, RuntimeOptions options)
    : m_spec(std::move(spec))
    , m_options(options)
    , m_codec(dilocoCodec(m_spec.codec))
{
    // Within what the join reply may carry (net/wire/limits.h), so that the
    // liveness rule applied here is the one announced.
    m_options.heartbeatIntervalMs
        = std::clamp(m_options.heartbeatIntervalMs, net::kMinHeartbeatIntervalMs, net::kMaxHeartbeatIntervalMs);
    m_options.heartbeatLiveness
        = std::clamp(m_options.heartbeatLiveness, net::kMinHeartbeatLiveness, net::kMaxHeartbeatLiveness);
    m_options.retryAfterMs = std::min(m_options.retryAfterMs, net::kMaxDelayMs);
}

ProjectRuntime::~ProjectRuntime()
{
    if (m_evaluation)
        m_evaluation->loss.wait();
}

Result<std::unique_ptr<ProjectRuntime>> ProjectRuntime::open(
    ProjectSpec spec, const std::filesystem::path& stateDir, RuntimeOptions options, int64_t nowMs)
{
    std::unique_ptr<ProjectRuntime> runtime(new ProjectRuntime(std::move(spec), options));
    try {
        if (Status s = runtime->initialise(stateDir, nowMs); !s)
            return s.error();
    } catch (const c10::Error& e) {
        return Error::make("project_failed", runtime->name() + ": " + e.what_without_backtrace());
    } catch (const std::exception& e) { // a damaged pending record, say
        return Error::make("project_failed", runtime->name() + ": " + e.what());
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
    auto checkpoints = CheckpointStore::open(stateDir / "checkpoints", m_spec.checkpoints);
    if (!checkpoints)
        return checkpoints.error();
    m_checkpoints = std::move(*checkpoints);

    torch::manual_seed(m_spec.init.seed);
    m_model = engine::Gpt(m_spec.model);
    m_model->eval();
    m_manifest = diloco::manifestOf(m_model);
    m_parameters = m_manifest.totalElements;
    for (const auto& entry : m_manifest.entries)
        m_wireManifest.push_back({entry.name, std::vector<uint64_t>(entry.shape.begin(), entry.shape.end())});
    m_manifestSha = net::sha256Hex(net::manifestText(m_wireManifest));
    m_outer = std::make_unique<diloco::OuterNesterov>(
        m_parameters, diloco::OuterOptions{m_spec.outer.lr, m_spec.outer.momentum, m_spec.outer.nesterov});
    m_aggregator = std::make_unique<diloco::RoundAggregator>(m_parameters);
    // No honest AdamW run of H steps moves the weights further than this.
    diloco::NormGate::Options gate;
    gate.absoluteMax = diloco::adamNormCeiling(m_parameters, m_spec.inner.steps, m_spec.inner.learningRate);
    m_normGate = diloco::NormGate(gate);
    std::filesystem::create_directories(pendingDir());
    std::filesystem::create_directories(uploadsDir()); // restoreOpenTasks() keeps the uploads of open tasks
    std::filesystem::create_directories(tasksDir());

    if (!m_store->lastRound()) {
        if (Status s = createVersionZero(nowMs); !s)
            return s;
    } else {
        auto state = m_store->loadLatest();
        if (!state)
            return state.error();
        m_version = state->version;
        m_params = std::move(state->params);
        m_residual = state->updateResidual.empty() ? std::vector<float>(std::size_t(m_parameters), 0.0f)
                                                   : std::move(state->updateResidual);
        if (!state->momentum.empty())
            if (Status s = m_outer->setMomentum(std::move(state->momentum)); !s)
                return s;
        if (Status s = restoreServiceBytes(state->extra); !s)
            return Error::make(s.error().code, m_store->lastRound()->stateFile + ": " + s.error().message);
        m_lastValLoss = m_store->lastRound()->valLoss;
        m_totalTokens = m_store->lastRound()->totalTokens;
    }
    m_paramsSha = parametersSha256Hex(m_params);
    auto plan = m_store->restoreDataPlan(*m_data);
    if (!plan)
        return plan.error();
    m_plan = std::move(*plan);
    auto reserved = m_store->ledger().meta(kLeaseIdsReservedKey);
    if (!reserved)
        return reserved.error();
    if (*reserved) {
        uint64_t ceiling = 0;
        const std::string& text = **reserved;
        if (std::from_chars(text.data(), text.data() + text.size(), ceiling).ec != std::errc())
            return Error::make(
                "state_corrupt", "the ledger's " + std::string(kLeaseIdsReservedKey) + " is not a number");
        m_plan->skipLeaseIdsBelow(ceiling);
        m_leaseIdCeiling = ceiling;
    }
    if (Status s = publishResources(); !s)
        return s;
    if (Status s = replayPending(); !s)
        return s;
    return restoreOpenTasks();
}

Status ProjectRuntime::createVersionZero(int64_t nowMs)
{
    if (m_spec.init.importDir) {
        auto imported = engine::importHuggingFaceGpt2(*m_spec.init.importDir);
        if (!imported)
            return imported.error();
        if (Status s = engine::loadParameters(m_model, imported->parameters); !s)
            return s;
    }
    m_params = diloco::flatten(m_model);
    m_residual.assign(std::size_t(m_parameters), 0.0f);
    m_version = 0;
    m_lastValLoss = evaluate(m_params);
    GlobalState state{0, m_params, {}, {}, {}};
    RoundCommit commit;
    commit.record.round = 0;
    commit.record.valLoss = m_lastValLoss;
    commit.record.closedAtMs = nowMs;
    return m_store->commit(state, std::move(commit), {});
}

// The current state for joiners, and the update that produced it for those
// one version behind. Older ones are withdrawn.
Status ProjectRuntime::publishResources()
{
    const std::string state = stateResourceName(m_version);
    if (!m_resources.contains(state)) {
        std::string bytes(reinterpret_cast<const char*>(m_params.data()), m_params.size() * sizeof(float));
        if (Status s = m_resources.addBlob(state, std::move(bytes)); !s)
            return s;
    }
    m_resources.remove(stateResourceName(m_version - 1));
    m_resources.remove(updateResourceName(m_version - 1));
    if (m_version > 0 && !m_resources.contains(updateResourceName(m_version))) {
        auto update = m_store->readUpdate(m_version);
        if (update)
            if (Status s = m_resources.addBlob(updateResourceName(m_version), std::move(*update)); !s)
                return s;
    }
    auto list = m_checkpoints->list();
    if (!list)
        return list.error();
    for (const CheckpointInfo& checkpoint : *list)
        for (const CheckpointFile& file : checkpoint.files) {
            const std::string name = "checkpoint/round-" + std::to_string(checkpoint.round) + "/" + file.name;
            if (!m_resources.contains(name))
                if (Status s = m_resources.addFile(name, checkpoint.dir / file.name); !s)
                    return s;
        }
    return Status::success();
}

net::ProjectInfo ProjectRuntime::info() const
{
    net::ProjectInfo info;
    info.name = m_spec.name;
    info.description = m_spec.description;
    info.model = {uint64_t(m_spec.model.nLayer), uint64_t(m_spec.model.nHead), uint64_t(m_spec.model.nEmbd),
        uint64_t(m_spec.model.blockSize), uint64_t(m_spec.model.vocabSize)};
    info.codec = std::string(diloco::codecName(m_codec));
    info.round = uint64_t(m_version + 1);
    info.version = uint64_t(m_version);
    info.tokensTrained = uint64_t(m_totalTokens);
    info.volunteersOnline = volunteersOnline();
    info.valLoss = m_lastValLoss;
    return info;
}

uint64_t ProjectRuntime::volunteersOnline() const
{
    uint64_t n = 0;
    for (const auto& [key, v] : m_volunteers)
        n += v.online ? 1 : 0;
    return n;
}

void ProjectRuntime::touch(const std::string& key, int64_t nowMs)
{
    auto it = m_volunteers.find(key);
    if (it != m_volunteers.end() && it->second.online)
        it->second.lastSeenMs = nowMs;
}

Result<ProjectRuntime::Volunteer*> ProjectRuntime::sessionOf(const std::string& key, const std::string& session)
{
    auto it = m_volunteers.find(key);
    if (it == m_volunteers.end() || !it->second.online || it->second.session != session)
        return Error::make("not_joined", "no live session " + session + " for this key in " + m_spec.name + "; join");
    return &it->second;
}

Result<net::JoinReply> ProjectRuntime::join(const std::string& key, const net::JoinRequest& request, int64_t nowMs)
{
    if (Status s = m_store->ledger().upsertVolunteer(key, request.displayName, nowMs); !s)
        return s.error();
    Volunteer& v = m_volunteers[key];
    v.displayName = request.displayName;
    v.session = randomSession();
    v.lastSeenMs = nowMs;
    v.online = true;

    net::JoinReply reply;
    reply.session = v.session;
    reply.project = info();
    reply.manifest = m_wireManifest;
    reply.manifestSha256 = m_manifestSha;
    reply.version = uint64_t(m_version);
    reply.stateResource = stateResourceName(m_version);
    reply.stateSha256 = m_paramsSha;
    reply.stateBytes = uint64_t(m_parameters) * 4;
    reply.chunkBytes = net::kDefaultChunkBytes;
    reply.codec = std::string(diloco::codecName(m_codec));
    const InnerSpec& in = m_spec.inner;
    reply.inner = {uint64_t(in.steps), uint64_t(in.batchSize), uint64_t(m_spec.model.blockSize), in.learningRate,
        in.minLr, uint64_t(in.warmupIters), uint64_t(in.lrDecayIters), in.beta1, in.beta2, in.weightDecay, in.gradClip};
    reply.heartbeatIntervalMs = m_options.heartbeatIntervalMs;
    reply.heartbeatLiveness = m_options.heartbeatLiveness;
    reply.eventsPort = m_options.eventsPort;
    return reply;
}

Result<net::HeartbeatReply> ProjectRuntime::heartbeat(const std::string& key, const net::HeartbeatRequest& request)
{
    if (auto v = sessionOf(key, request.session); !v)
        return v.error();
    bool working = false;
    for (const auto& [id, task] : m_tasks)
        working = working || task.lease.publicKey == key;
    const bool available = !m_wrappingUp && !workHandedOut() && m_plan->canLease();
    return net::HeartbeatReply{uint64_t(m_version), uint64_t(m_version + 1),
        std::string(working || available ? net::kStateTrain : net::kStateWait), working && m_wrappingUp};
}

Result<net::LeaveReply> ProjectRuntime::leave(const std::string& key, const net::LeaveRequest& request)
{
    auto v = sessionOf(key, request.session);
    if (!v)
        return v.error();
    (*v)->online = false;
    std::vector<uint64_t> ids;
    for (const auto& [id, task] : m_tasks)
        if (task.lease.publicKey == key)
            ids.push_back(id);
    for (uint64_t id : ids)
        dropTask(id, true);
    return net::LeaveReply{};
}

bool ProjectRuntime::workHandedOut() const
{
    return m_acceptedTokens + int64_t(outstandingTokens()) >= roundTarget(m_spec);
}

uint64_t ProjectRuntime::outstandingTokens() const
{
    uint64_t tokens = 0;
    for (const auto& [id, task] : m_tasks)
        tokens += task.tokens;
    return tokens;
}

void ProjectRuntime::dropTask(uint64_t taskId, bool returnRange)
{
    auto it = m_tasks.find(taskId);
    if (it == m_tasks.end())
        return;
    std::error_code ec;
    std::filesystem::remove(it->second.uploadFile, ec);
    if (returnRange)
        m_plan->releaseLease(taskId);
    m_tasks.erase(it);
    forgetOpenTask(taskId);
    // A task that ends without an acceptance (rejected, expired, its holder
    // gone) may leave the round short of work: hand out tasks again, and
    // wrap up again once there is enough.
    if (m_wrappingUp && !workHandedOut())
        m_wrappingUp = m_wrapUpAnnounced = false;
}

Result<net::GetTaskReply> ProjectRuntime::getTask(
    const std::string& key, const net::GetTaskRequest& request, int64_t nowMs)
{
    if (auto v = sessionOf(key, request.session); !v)
        return v.error();
    if (int64_t(request.version) != m_version)
        return Error::make("stale_version",
            "you hold version " + std::to_string(request.version) + ", the project is at " + std::to_string(m_version)
                + ": get_update first");
    auto toWire = [&](const TaskState& task) {
        net::Task wire;
        wire.taskId = task.lease.id;
        wire.round = uint64_t(m_version + 1);
        wire.version = uint64_t(m_version);
        for (const Piece& piece : task.lease.pieces)
            wire.shards.push_back({m_data->train[piece.shard].path().filename().string(), piece.begin, piece.end});
        wire.innerSteps = uint64_t(m_spec.inner.steps);
        // At least 1 (the wire's minimum): a lease past its deadline is only
        // expired at the next tick.
        wire.deadlineMs = uint64_t(std::max<int64_t>(1, task.lease.deadlineMs - nowMs));
        return wire;
    };
    for (const auto& [id, task] : m_tasks)
        if (task.lease.publicKey == key)
            return net::GetTaskReply{toWire(task), 0};
    net::GetTaskReply none{std::nullopt, m_options.retryAfterMs};
    if (m_wrappingUp || workHandedOut()) {
        wrapUpIfIdle(key);
        return none;
    }
    if (!m_plan->canLease())
        return none;
    if (Status s = reserveLeaseId(); !s)
        return s.error();
    auto lease = m_plan->lease(key, nowMs);
    if (!lease)
        return none;
    TaskState task{*lease, taskTokens(), 0, 0, uploadsDir() / ("task-" + std::to_string(lease->id) + ".part"), nullptr};
    // Recorded before the volunteer hears of it, so that a restart keeps it.
    if (Status s = recordOpenTask(task); !s) {
        m_plan->releaseLease(lease->id);
        return s.error();
    }
    auto [it, inserted] = m_tasks.emplace(lease->id, std::move(task));
    return net::GetTaskReply{toWire(it->second), 0};
}

uint64_t ProjectRuntime::taskTokens() const
{
    return uint64_t(m_spec.inner.steps * m_spec.inner.batchSize * m_spec.model.blockSize);
}

Status ProjectRuntime::reserveLeaseId()
{
    if (m_plan->nextLeaseId() < m_leaseIdCeiling)
        return {};
    const uint64_t ceiling = m_plan->nextLeaseId() + kLeaseIdBlock;
    if (Status s = m_store->ledger().setMeta(kLeaseIdsReservedKey, std::to_string(ceiling)); !s)
        return s;
    m_leaseIdCeiling = ceiling;
    return {};
}

PublishedEvents ProjectRuntime::tick(int64_t nowMs)
{
    PublishedEvents events;
    finishEvaluation(false, events);
    // A loop that stalled (a slow disk, a descheduled process) must not count
    // its own silence against the volunteers.
    const int64_t sinceLastTick = m_lastTickMs > 0 ? nowMs - m_lastTickMs : 0;
    m_lastTickMs = nowMs;
    if (sinceLastTick > int64_t(m_options.heartbeatIntervalMs))
        for (auto& [key, v] : m_volunteers)
            v.lastSeenMs += sinceLastTick;
    const int64_t deadAfterMs = int64_t(m_options.heartbeatIntervalMs * m_options.heartbeatLiveness);
    for (auto& [key, v] : m_volunteers) {
        if (!v.online || nowMs - v.lastSeenMs <= deadAfterMs)
            continue;
        v.online = false;
        std::vector<uint64_t> ids;
        for (const auto& [id, task] : m_tasks)
            if (task.lease.publicKey == key)
                ids.push_back(id);
        for (uint64_t id : ids)
            dropTask(id, true);
    }
    for (const Lease& expired : m_plan->expire(nowMs))
        dropTask(expired.id, false);
    if (m_wrappingUp && !m_wrapUpAnnounced) {
        m_wrapUpAnnounced = true;
        events.frames.push_back(
            net::encodeEvent(m_spec.name, net::RoundWrapUpEvent{uint64_t(m_version + 1), uint64_t(m_version)}));
    }
    if (!roundDue())
        return events;
    auto closed = closeRound(nowMs);
    if (!closed) {
        std::fprintf(stderr, "%s: round %lld not closed: %s\n", m_spec.name.c_str(),
            static_cast<long long>(m_version + 1), closed.error().message.c_str());
        return events;
    }
    for (auto& frame : closed->frames)
        events.frames.push_back(std::move(frame));
    return events;
}

bool ProjectRuntime::roundDue() const
{
    // A round that wrapped up closes with the tokens its volunteers trained
    // in the time the first one took, which may fall short of the target.
    return !m_accepted.empty() && m_tasks.empty() && (m_acceptedTokens >= roundTarget(m_spec) || m_wrappingUp);
}

void ProjectRuntime::wrapUpIfIdle(const std::string& key)
{
    // A volunteer that delivered in this round asks for more and there is
    // none: rather than let it wait for the slowest, the round wraps up.
    if (!m_spec.round.wrapUp || m_wrappingUp || m_tasks.empty() || !workHandedOut())
        return;
    const bool delivered = std::any_of(
        m_accepted.begin(), m_accepted.end(), [&](const Accepted& a) { return a.record.publicKey == key; });
    if (delivered)
        m_wrappingUp = true;
}

std::filesystem::path ProjectRuntime::pendingDir() const
{
    return m_store->dir() / "pending";
}
std::filesystem::path ProjectRuntime::uploadsDir() const
{
    return m_store->dir() / "uploads";
}

} // namespace crowdtrain::coordinator
