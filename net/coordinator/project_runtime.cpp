#include "net/coordinator/project_runtime.h"

#include "core/file_io.h"
#include "engine/hf_gpt2.h"
#include "engine/model_io.h"
#include "net/transfer/sha256.h"
#include "net/wire/error_codes.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <string_view>

namespace crowdtrain::coordinator {
namespace {

std::string stateResourceName(int64_t version)
{
    return "state-v" + std::to_string(version);
}
std::string updateResourceName(int64_t version)
{
    return "update-v" + std::to_string(version);
}

} // namespace

int64_t unixTimeMs()
{
    using namespace std::chrono;
    return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

ProjectRuntime::ProjectRuntime(ProjectSpec spec, RuntimeOptions options)
    : m_spec(std::move(spec))
    , m_options(std::move(options))
    , m_codec(m_spec.codec)
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

ProjectRuntime::~ProjectRuntime() = default;

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
    m_pieces.emplace(m_resources, *m_data, m_spec.tokensPerPiece() * ProjectSpec::kMaxPiecesPerTask);
    auto store = ProjectStore::open(m_spec, stateDir);
    if (!store)
        return store.error();
    m_store = std::move(*store);
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
    if (m_codec == diloco::Codec::Sparse) {
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
    m_tasks = std::make_unique<TaskBoard>(
        *m_store, *m_plan, uint64_t(m_spec.inner.steps * m_spec.inner.batchSize * m_spec.model.blockSize));
    m_submissions
        = std::make_unique<Submissions>(m_spec, m_codec, m_parameters, m_sparseLayout ? &*m_sparseLayout : nullptr,
            *m_store, *m_plan, *m_tasks, *m_round, [this](uint64_t taskId) { endTask(taskId, true); });
    m_queries = std::make_unique<ProjectQueries>(*m_store, *m_checkpoints);
    m_swarm = std::make_unique<ProjectSwarm>(m_options.swarm, m_resources);
    if (Status s = m_submissions->open(gateRecord); !s)
        return Error::make(s.error().code, m_store->lastRound()->stateFile + ": " + s.error().message);
    if (Status s = m_tasks->open(); !s)
        return s;
    if (Status s = publishResources(); !s)
        return s;
    if (Status s = publishTokenizer(); !s)
        return s;
    if (Status s = m_submissions->replayPending(); !s)
        return s;
    return m_tasks->restore(m_round->openRound(), [this](OpenTask& task) { return m_submissions->resumeUpload(task); });
}

// The current state for joiners, and the latest updates for those some
// versions behind (m_keptUpdates). Older states stay while they are being
// downloaded (retireOldStates).
Status ProjectRuntime::publishResources()
{
    const int64_t version = m_round->version();
    const std::string state = stateResourceName(version);
    if (!m_resources.contains(state)) {
        const std::vector<float>& params = m_round->params();
        std::string bytes(reinterpret_cast<const char*>(params.data()), params.size() * sizeof(float));
        if (Status s = m_resources.addBlob(state, std::move(bytes)); !s)
            return s;
    }
    if (m_publishedState && *m_publishedState != version)
        m_oldStates[*m_publishedState] = m_stateAskedMs[*m_publishedState];
    m_publishedState = version;
    if (version > 0 && !m_resources.contains(updateResourceName(version))) {
        auto update = m_store->readUpdate(version);
        if (update) {
            const uint64_t bytes = update->size();
            if (Status s = m_resources.addBlob(updateResourceName(version), std::move(*update)); !s)
                return s;
            m_keptUpdates.push_back({version, m_round->paramsSha(), bytes});
        }
    }
    const uint64_t stateBytes = uint64_t(m_parameters) * sizeof(float);
    uint64_t keptBytes = 0;
    for (const KeptUpdate& kept : m_keptUpdates)
        keptBytes += kept.bytes;
    while (!m_keptUpdates.empty() && (keptBytes > stateBytes || m_keptUpdates.size() > kMaxKeptUpdates)) {
        keptBytes -= m_keptUpdates.front().bytes;
        m_resources.remove(updateResourceName(m_keptUpdates.front().version));
        m_keptUpdates.pop_front();
    }
    auto list = m_checkpoints->list();
    if (!list)
        return list.error();
    std::set<std::string> kept;
    if (m_swarm->enabled() && stateBytes >= kTorrentMinBytes) {
        // The state is served in chunks whether or not the swarm seeds it.
        if (Status s = seedState(); !s)
            std::fprintf(
                stderr, "%s: %s is not seeded: %s\n", m_spec.name.c_str(), state.c_str(), s.error().message.c_str());
        else
            kept.insert(state);
        for (const auto& [old, askedMs] : m_oldStates)
            kept.insert(stateResourceName(old));
    }
    for (const CheckpointInfo& checkpoint : *list)
        for (const CheckpointFile& file : checkpoint.files) {
            const std::string name = checkpointResourceName(checkpoint.round, file.name);
            if (!m_resources.contains(name))
                if (Status s = m_resources.addFile(name, checkpoint.dir / file.name); !s)
                    return s;
            // A file the swarm cannot seed is still served in chunks.
            if (Status s = m_swarm->publish(name, checkpoint.dir / file.name); !s)
                std::fprintf(
                    stderr, "%s: %s is not seeded: %s\n", m_spec.name.c_str(), name.c_str(), s.error().message.c_str());
            kept.insert(name);
        }
    for (const std::string& seeded : m_swarm->published())
        if (!kept.count(seeded))
            m_swarm->withdraw(seeded);
    return Status::success();
}

// theta_v as a file of its own (the torrent's one file, named as the
// resource) under STATE/swarm/, seeded; older ones are deleted.
Status ProjectRuntime::seedState()
{
    const std::string name = stateResourceName(m_round->version());
    const std::filesystem::path dir = m_store->dir() / "swarm";
    const std::filesystem::path file = dir / name;
    if (!m_swarm->torrentOf(name)) {
        std::error_code ec;
        std::filesystem::create_directories(dir, ec);
        if (ec)
            return Error::make(net::errc::kIoError, "cannot create " + dir.string() + ": " + ec.message());
        const std::vector<float>& params = m_round->params();
        const std::string_view bytes(reinterpret_cast<const char*>(params.data()), params.size() * sizeof(float));
        if (Status s = core::writeFileAtomic(file, bytes); !s)
            return s;
        if (Status s = m_swarm->publish(name, file); !s)
            return s;
    }
    std::set<std::string> keep{name, "." + name + ".torrent"};
    for (const auto& [old, askedMs] : m_oldStates)
        keep.insert({stateResourceName(old), "." + stateResourceName(old) + ".torrent"});
    std::vector<std::filesystem::path> older;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec))
        if (!keep.count(entry.path().filename().string()))
            older.push_back(entry.path());
    for (const std::filesystem::path& path : older)
        std::filesystem::remove(path, ec);
    return Status::success();
}

void ProjectRuntime::noteDownload(const std::string& name, int64_t nowMs)
{
    std::string_view resource = name;
    if (resource.starts_with(kTorrentResourcePrefix))
        resource.remove_prefix(kTorrentResourcePrefix.size());
    constexpr std::string_view kState = "state-v";
    if (!resource.starts_with(kState))
        return;
    int64_t version = 0;
    const char* end = resource.data() + resource.size();
    if (auto [at, error] = std::from_chars(resource.data() + kState.size(), end, version);
        error != std::errc() || at != end)
        return;
    m_stateAskedMs[version] = nowMs;
    if (auto old = m_oldStates.find(version); old != m_oldStates.end())
        old->second = nowMs;
}

// Withdraws the older states nobody asked for in the grace, and all but the
// newest kMaxOldStates. The grace is kOldStateGraceMs, or the longest a
// volunteer waits for one chunk (2 x heartbeat x liveness) when longer: a
// chunk's fetches are that far apart on the slowest link the session allows.
void ProjectRuntime::retireOldStates(int64_t nowMs)
{
    const int64_t graceMs
        = std::max<int64_t>(kOldStateGraceMs, int64_t(2 * m_options.heartbeatIntervalMs * m_options.heartbeatLiveness));
    std::vector<int64_t> gone;
    std::size_t newer = 0;
    for (auto it = m_oldStates.rbegin(); it != m_oldStates.rend(); ++it) {
        const bool asked = it->second > 0 && nowMs - it->second < graceMs;
        if (asked && newer < kMaxOldStates)
            ++newer;
        else
            gone.push_back(it->first);
    }
    for (const int64_t version : gone) {
        const std::string name = stateResourceName(version);
        m_resources.remove(name);
        m_swarm->withdraw(name);
        std::error_code ec;
        std::filesystem::remove(m_store->dir() / "swarm" / name, ec);
        std::filesystem::remove(m_store->dir() / "swarm" / ("." + name + ".torrent"), ec);
        m_oldStates.erase(version);
    }
    // Asks for states no longer served are forgotten.
    std::erase_if(m_stateAskedMs,
        [&](const auto& entry) { return entry.first != m_round->version() && !m_oldStates.count(entry.first); });
}

net::CheckpointInfo ProjectRuntime::withTorrents(net::CheckpointInfo checkpoint) const
{
    for (net::FileInfo& file : checkpoint.files)
        file.torrent = m_swarm->torrentOf(file.resource);
    return checkpoint;
}

Result<net::ListCheckpointsReply> ProjectRuntime::listCheckpoints(const std::optional<std::string>& key)
{
    auto reply = m_queries->listCheckpoints();
    // The info-hash is what a BitTorrent peer names to be served the file:
    // only those who may have the file learn it.
    const bool torrents = m_spec.checkpointAccess == CheckpointAccess::Everyone || (key && checkpointAccess(*key));
    if (reply && torrents)
        for (net::CheckpointInfo& checkpoint : reply->checkpoints)
            checkpoint = withTorrents(std::move(checkpoint));
    return reply;
}

Result<net::SwarmPeersReply> ProjectRuntime::swarmPeers(
    const std::string& key, const net::SwarmPeersRequest& request, const std::string& address, int64_t nowMs)
{
    const std::optional<std::string> resource = m_swarm->resourceOf(request.infoHash);
    if (!resource)
        return Error::make(net::errc::kNotFound, "project " + m_spec.name + " seeds no torrent " + request.infoHash);
    if (Status allowed = prepareResource(key, *resource); !allowed)
        return allowed.error();
    if (!request.seeding)
        noteDownload(*resource, nowMs);
    return m_swarm->peers(key, request, address, nowMs);
}

net::ProjectInfo ProjectRuntime::info() const
{
    net::ProjectInfo info;
    info.name = m_spec.name;
    info.description = m_spec.description;
    info.model = {uint64_t(m_spec.model.nLayer), uint64_t(m_spec.model.nHead), uint64_t(m_spec.model.nEmbd),
        uint64_t(m_spec.model.blockSize), uint64_t(m_spec.model.vocabSize)};
    info.codec = std::string(diloco::codecName(m_codec));
    info.round = uint64_t(m_round->openRound());
    info.version = uint64_t(m_round->version());
    info.tokensTrained = uint64_t(m_round->totalTokens());
    info.volunteersOnline = volunteersOnline();
    info.valLoss = m_round->lastValLoss();
    info.parameters = uint64_t(m_parameters);
    info.tokenGoal = m_spec.tokenGoal;
    info.license = m_spec.license;
    info.checkpointAccess = std::string(checkpointAccessName(m_spec.checkpointAccess));
    if (auto list = m_checkpoints->list(); list && !list->empty())
        info.newestCheckpoint = uint64_t(list->back().round);
    info.tokenizer = m_tokenizerFiles;
    return info;
}

namespace {

// A rejection that judged the payload itself (not a stale or unknown task).
bool isVerdictOnPayload(std::string_view code)
{
    return code == net::errc::kNormOutOfBounds || code == net::errc::kDirectionOutOfBounds
        || code == net::errc::kNonFinite || code == net::errc::kBadShape || code == net::errc::kBadTokens
        || code == net::errc::kChecksumMismatch;
}

constexpr std::string_view kCheckpointPrefix = "checkpoint/";
constexpr std::string_view kTokenizerPrefix = "tokenizer/";

} // namespace

Status ProjectRuntime::checkpointAccess(const std::string& key)
{
    switch (m_spec.checkpointAccess) {
    case CheckpointAccess::Everyone:
        return Status::success();
    case CheckpointAccess::Participants: {
        auto totals = m_store->ledger().volunteerTotals(key);
        if (totals && totals->accepted > 0)
            return Status::success();
        return Error::make(net::errc::kForbidden,
            "project " + m_spec.name + " shares its checkpoints with participants only: train one accepted task first");
    }
    case CheckpointAccess::Nobody:
        break;
    }
    return Error::make(
        net::errc::kForbidden, "project " + m_spec.name + " does not share its checkpoints until its release");
}

Status ProjectRuntime::prepareResource(const std::string& key, const std::string& name)
{
    // A checkpoint file, or its .torrent: the project's terms decide.
    if (name.starts_with(kCheckpointPrefix)
        || (name.starts_with(kTorrentResourcePrefix)
            && name.substr(kTorrentResourcePrefix.size()).starts_with(kCheckpointPrefix)))
        return checkpointAccess(key);
    if (DataPieces::handles(name))
        return m_pieces->prepare(name, [&](uint64_t taskId) -> const std::vector<Piece>* {
            const OpenTask* task = m_tasks->find(taskId, key);
            return task ? &task->lease.pieces : nullptr;
        });
    return Status::success();
}

// The tokenizer's files, so a volunteer needs nothing but the hub's address.
Status ProjectRuntime::publishTokenizer()
{
    if (!m_data->tokenizerDir)
        return Status::success();
    std::vector<std::filesystem::path> files;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(*m_data->tokenizerDir, ec))
        if (entry.is_regular_file())
            files.push_back(entry.path());
    if (ec)
        return Error::make(net::errc::kIoError, m_data->tokenizerDir->string() + ": " + ec.message());
    std::sort(files.begin(), files.end());
    if (files.size() > net::kMaxTokenizerFiles)
        return Error::make(net::errc::kBadSpec,
            m_data->tokenizerDir->string() + ": more than " + std::to_string(net::kMaxTokenizerFiles) + " files");
    for (const auto& file : files) {
        const std::string name = std::string(kTokenizerPrefix) + file.filename().string();
        if (Status s = m_resources.addFile(name, file); !s)
            return s;
        auto description = m_resources.describe(name);
        if (!description)
            return description.error();
        m_tokenizerFiles.push_back(
            {file.filename().string(), description->bytes, description->sha256, name, std::nullopt});
    }
    return Status::success();
}

Result<net::JoinReply> ProjectRuntime::join(const std::string& key, const net::JoinRequest& request, int64_t nowMs)
{
    if (Status s = m_store->ledger().upsertVolunteer(key, request.displayName, nowMs); !s)
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
    reply.stateTorrent = m_swarm->torrentOf(reply.stateResource);
    reply.chunkBytes = net::kDefaultChunkBytes;
    reply.codec = std::string(diloco::codecName(m_codec));
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
    const bool available = !m_wrapUp.active && !workHandedOut() && m_plan->canLease();
    const int64_t version = m_round->version();
    return net::HeartbeatReply{uint64_t(version), uint64_t(version + 1),
        std::string(working || available ? net::kStateTrain : net::kStateWait), working && m_wrapUp.active};
}

Result<net::LeaveReply> ProjectRuntime::leave(const std::string& key, const net::LeaveRequest& request)
{
    if (Status s = m_sessions->leave(key, request.session, m_spec.name); !s)
        return s.error();
    endTasksOf(key);
    return net::LeaveReply{};
}

bool ProjectRuntime::workHandedOut() const
{
    return m_round->acceptedTokens() + int64_t(m_tasks->outstandingTokens()) >= m_round->target();
}

void ProjectRuntime::endTask(uint64_t taskId, bool returnRange, bool keepWrapUp)
{
    m_tasks->drop(taskId, returnRange);
    // A task that ends without an acceptance (rejected, expired, its holder
    // gone) may leave the round short of work: hand out tasks again, and
    // wrap up again once there is enough.
    if (m_wrapUp.active && !keepWrapUp && !workHandedOut())
        m_wrapUp.active = m_wrapUp.announced = false;
}

void ProjectRuntime::endTasksOf(const std::string& key)
{
    for (uint64_t id : m_tasks->idsHeldBy(key))
        endTask(id, true);
}

Result<net::GetTaskReply> ProjectRuntime::getTask(
    const std::string& key, const net::GetTaskRequest& request, int64_t nowMs)
{
    if (Status s = m_sessions->check(key, request.session, m_spec.name); !s)
        return s.error();
    const int64_t version = m_round->version();
    if (int64_t(request.version) != version)
        return Error::make(net::errc::kStaleVersion,
            "you hold version " + std::to_string(request.version) + ", the project is at " + std::to_string(version)
                + ": get_update first");
    auto toWire = [&](const OpenTask& task) {
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
    };
    net::GetTaskReply none{std::nullopt, m_options.retryAfterMs};
    if (request.ahead) {
        // Work for the next round, trained while this one closes: at most
        // one such task per key and the next round's target in all.
        if (const OpenTask* held = m_tasks->aheadHeldBy(key)) {
            // Asked again: it has trained it and waits for the open round to
            // close. If it delivered in that round, the round wraps up rather
            // than keep it waiting; if the round is short of hands (a task
            // refused or lost) and it did not, it gives the task back and
            // takes the open round's work.
            const auto& accepted = m_round->accepted();
            const bool delivered = std::any_of(accepted.begin(), accepted.end(),
                [&](const AcceptedSubmission& a) { return a.record.publicKey == key; });
            if (delivered && m_spec.round.wrapUp) {
                m_wrapUp.active = true;
            } else if (!delivered && !m_wrapUp.active && !workHandedOut()) {
                endTask(held->lease.id, true);
                return none;
            }
            return net::GetTaskReply{toWire(*held), 0};
        }
        if (auto rejected = m_rejectionsThisRound.find(key);
            rejected != m_rejectionsThisRound.end() && rejected->second >= kMaxRejectionsPerKeyPerRound)
            return none;
        if (!(m_wrapUp.active || workHandedOut()))
            return none; // the open round still has work: submit, then ask for it
        if (int64_t(m_tasks->aheadTokens()) >= m_round->target())
            return none;
        auto task = m_tasks->lease(key, version + 1, nowMs, true);
        if (!task)
            return task.error();
        return *task ? net::GetTaskReply{toWire(**task), 0} : none;
    }
    if (const OpenTask* held = m_tasks->heldBy(key))
        return net::GetTaskReply{toWire(*held), 0};
    if (m_wrapUp.active || workHandedOut()) {
        wrapUpIfIdle(key);
        return none;
    }
    if (m_wrapUp.silentKeys.contains(key))
        return none;
    if (auto rejected = m_rejectionsThisRound.find(key); rejected != m_rejectionsThisRound.end()
        && rejected->second >= kMaxRejectionsPerKeyPerRound && othersAreWorking(key))
        return none;
    auto task = m_tasks->lease(key, version + 1, nowMs);
    if (!task)
        return task.error();
    if (!*task)
        return none;
    return net::GetTaskReply{toWire(**task), 0};
}

Result<net::UploadChunkReply> ProjectRuntime::uploadChunk(
    const std::string& key, const net::UploadChunkRequest& request, int64_t nowMs)
{
    if (Status s = m_sessions->check(key, request.session, m_spec.name); !s)
        return s.error();
    return m_submissions->uploadChunk(key, request, nowMs);
}

Result<net::SubmitReply> ProjectRuntime::submit(
    const std::string& key, const net::SubmitRequest& request, int64_t nowMs)
{
    if (Status s = m_sessions->check(key, request.session, m_spec.name); !s)
        return s.error();
    auto reply = m_submissions->submit(key, request, nowMs);
    if (!reply && isVerdictOnPayload(reply.error().code))
        ++m_rejectionsThisRound[key];
    return reply;
}

Result<net::GetUpdateReply> ProjectRuntime::getUpdate(const net::GetUpdateRequest& request) const
{
    const int64_t version = m_round->version();
    const auto kept = std::find_if(m_keptUpdates.begin(), m_keptUpdates.end(),
        [&](const KeptUpdate& u) { return u.version == int64_t(request.fromVersion) + 1; });
    const std::string name = kept == m_keptUpdates.end() ? std::string() : updateResourceName(kept->version);
    if (name.empty() || !m_resources.contains(name))
        return Error::make(net::errc::kNotFound,
            "no update from version " + std::to_string(request.fromVersion) + " (the project is at version "
                + std::to_string(version) + "): download " + stateResourceName(version));
    auto description = m_resources.describe(name);
    if (!description)
        return description.error();
    const std::string codec(m_sparseLayout ? net::kCodecSparse : net::kCodecInt8);
    return net::GetUpdateReply{request.fromVersion, uint64_t(kept->version), codec, uint64_t(m_parameters), name,
        description->bytes, description->sha256, kept->stateSha256};
}

bool ProjectRuntime::othersAreWorking(const std::string& key) const
{
    auto capped = [&](const std::string& other) {
        auto it = m_rejectionsThisRound.find(other);
        return it != m_rejectionsThisRound.end() && it->second >= kMaxRejectionsPerKeyPerRound;
    };
    for (const auto& [id, task] : m_tasks->tasks())
        if (task.lease.publicKey != key && !capped(task.lease.publicKey))
            return true;
    for (const AcceptedSubmission& accepted : m_round->accepted())
        if (accepted.record.publicKey != key && !capped(accepted.record.publicKey))
            return true;
    return false;
}

PublishedEvents ProjectRuntime::tick(int64_t nowMs)
{
    if (m_options.faultPoint)
        m_options.faultPoint("tick", m_round->openRound());
    PublishedEvents events;
    finishEvaluation(false, events);
    if (nowMs - m_swarmTickMs >= kSwarmTickPeriodMs) {
        m_swarmTickMs = nowMs;
        retireOldStates(nowMs);
        m_swarm->tick(nowMs);
    }
    for (const std::string& gone : m_sessions->expire(nowMs))
        endTasksOf(gone);
    for (uint64_t expired : m_tasks->expire(nowMs))
        endTask(expired, false); // the plan took the range back itself
    if (m_wrapUp.active && m_wrapUp.announced && nowMs - m_wrapUp.atMs > wrapUpGraceMs())
        dropSilentHolders(nowMs);
    if (m_wrapUp.active && !m_wrapUp.announced) {
        m_wrapUp.announced = true;
        m_wrapUp.atMs = nowMs;
        events.frames.push_back(net::encodeEvent(
            m_spec.name, net::RoundWrapUpEvent{uint64_t(m_round->openRound()), uint64_t(m_round->version())}));
    }
    if (!roundDue())
        return events;
    auto closed = closeRound(nowMs);
    if (!closed) {
        std::fprintf(stderr, "%s: round %lld not closed: %s\n", m_spec.name.c_str(),
            static_cast<long long>(m_round->openRound()), closed.error().message.c_str());
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
    return !m_round->accepted().empty() && m_tasks->outstandingTokens() == 0
        && (m_round->acceptedTokens() >= m_round->target() || m_wrapUp.active);
}

void ProjectRuntime::wrapUpIfIdle(const std::string& key)
{
    // A volunteer that delivered in this round asks for more and there is
    // none: rather than let it wait for the slowest, the round wraps up.
    if (!m_spec.round.wrapUp || m_wrapUp.active || m_tasks->outstandingTokens() == 0 || !workHandedOut())
        return;
    const auto& accepted = m_round->accepted();
    if (std::any_of(
            accepted.begin(), accepted.end(), [&](const AcceptedSubmission& a) { return a.record.publicKey == key; }))
        m_wrapUp.active = true;
}

// Holders hear of a wrap-up at their next heartbeat and stop after the
// step they are in: two liveness periods are enough to start uploading.
int64_t ProjectRuntime::wrapUpGraceMs() const
{
    return 2 * int64_t(m_options.heartbeatIntervalMs * m_options.heartbeatLiveness);
}

void ProjectRuntime::dropSilentHolders(int64_t nowMs)
{
    std::vector<uint64_t> silent;
    for (const auto& [id, task] : m_tasks->tasks())
        if (!task.ahead && (task.lastUploadMs < m_wrapUp.atMs || nowMs - task.lastUploadMs > wrapUpGraceMs()))
            silent.push_back(id);
    for (uint64_t id : silent) {
        m_wrapUp.silentKeys.insert(m_tasks->tasks().at(id).lease.publicKey);
        std::fprintf(stderr, "%s: round %lld wraps up without task %llu (its holder sent nothing)\n",
            m_spec.name.c_str(), static_cast<long long>(m_round->openRound()), static_cast<unsigned long long>(id));
        endTask(id, true, true);
    }
}

Result<PublishedEvents> ProjectRuntime::closeRound(int64_t nowMs)
{
    auto closed = m_round->close(nowMs, volunteersOnline(), *m_plan, m_submissions->gateRecord());
    if (!closed)
        return closed.error(); // nothing changed: the round stays open and the next tick tries again
    const int64_t round = closed->round;
    const RoundRecord& record = closed->commit.record;
    int64_t tokens = 0;
    for (const ContributionRecord& c : closed->commit.contributions)
        tokens += c.tokens;
    auto rejected = m_store->ledger().rejectionsInRound(round);
    net::RoundClosedEvent event{uint64_t(round), uint64_t(round), record.trainLoss, std::nullopt, uint64_t(tokens),
        uint64_t(closed->commit.contributions.size()), rejected ? uint64_t(rejected->size()) : 0, volunteersOnline()};
    m_submissions->roundClosed();
    m_tasks->promoteAhead();
    m_wrapUp = WrapUp{};
    m_rejectionsThisRound.clear();

    // The new version is served from here on; its validation loss (and the
    // checkpoint that records it) follow when the evaluation thread is done,
    // so volunteers never wait for it.
    PublishedEvents events;
    finishEvaluation(true, events);
    m_evaluation->start(round, m_round->totalTokens(), std::make_shared<const std::vector<float>>(m_round->params()),
        event, m_checkpoints->isDue(round));
    if (Status s = publishResources(); !s)
        std::fprintf(stderr, "%s: %s\n", m_spec.name.c_str(), s.error().message.c_str());
    events.frames.insert(
        events.frames.begin(), net::encodeEvent(m_spec.name, net::VersionPublishedEvent{uint64_t(round)}));
    return events;
}

void ProjectRuntime::finishEvaluation(bool wait, PublishedEvents& events)
{
    std::optional<Evaluation::Done> done = m_evaluation->finish(wait);
    if (!done)
        return;
    if (done->valLoss)
        if (Status s = m_store->ledger().setValidationLoss(done->round, *done->valLoss); !s)
            std::fprintf(stderr, "%s: %s\n", m_spec.name.c_str(), s.error().message.c_str());
    if (done->round == m_round->version())
        m_round->setLastValLoss(done->valLoss);
    events.frames.push_back(net::encodeEvent(m_spec.name, done->event));
    if (!m_checkpoints->isDue(done->round))
        return;
    auto named = unflattenParameters(m_spec.model, *done->params);
    auto published = named
        ? m_checkpoints->publish(done->round, done->tokens, done->valLoss, m_spec.model, *named, unixTimeMs(),
            done->samplesJson.empty() ? std::map<std::string, std::string>{}
                                      : std::map<std::string, std::string>{{"samples.json", done->samplesJson}})
        : Result<CheckpointInfo>(named.error());
    if (!published) {
        std::fprintf(stderr, "%s: checkpoint of round %lld failed: %s\n", m_spec.name.c_str(),
            static_cast<long long>(done->round), published.error().message.c_str());
        return;
    }
    if (Status s = publishResources(); !s)
        std::fprintf(stderr, "%s: %s\n", m_spec.name.c_str(), s.error().message.c_str());
    // Events reach every subscriber: torrents only when everyone may download.
    net::CheckpointInfo announced = wireCheckpoint(*published);
    if (m_spec.checkpointAccess == CheckpointAccess::Everyone)
        announced = withTorrents(std::move(announced));
    events.frames.push_back(net::encodeEvent(m_spec.name, net::CheckpointPublishedEvent{std::move(announced)}));
}

} // namespace crowdtrain::coordinator
