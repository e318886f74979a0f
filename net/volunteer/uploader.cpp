#include "net/volunteer/uploader.h"

#include "engine/diloco/manifest.h"
#include "engine/diloco/submission_encoder.h"
#include "net/transfer/sha256.h"
#include "net/volunteer/theta_sync.h"
#include "net/wire/error_codes.h"

namespace crowdtrain::volunteer {
namespace {

// Rejections of a submission or its upload: the server will never take it.
bool dropsSubmission(const Error& error)
{
    return !isConnectionError(error) && error.code != net::errc::kNotJoined && error.code != net::errc::kCancelled;
}

} // namespace

Uploader::Uploader(Session& session, const ProjectFolder& folder, Reporter& reporter, const std::atomic<bool>& stop,
    std::function<void(std::vector<float>&)> alterPseudoGradient)
    : m_session(session)
    , m_folder(folder)
    , m_reporter(reporter)
    , m_stop(stop)
    , m_alter(std::move(alterPseudoGradient))
{ }

void Uploader::configure(diloco::Codec codec, uint64_t elements, const std::string& manifestSha256,
    std::optional<diloco::SparseLayout> sparse)
{
    m_codec = codec;
    m_sparse = std::move(sparse);
    m_manifestSha256 = manifestSha256;
    m_elements = elements;
}

// The residual saved after the last task, when it belongs to this model;
// else zeros (a new volunteer, another model, a damaged file).
void Uploader::loadResidual()
{
    auto residual = loadFloats(m_folder.residualFile());
    const bool first = !m_residualSeen;
    m_residualSeen = true;
    if (!residual) {
        m_reporter.log("ignoring the residual on disk: %s", residual.error().message.c_str());
    } else if (*residual && (*residual)->manifestSha256 == m_manifestSha256
        && (*residual)->values.size() == m_elements) {
        m_residual = std::move((*residual)->values);
        if (first)
            m_reporter.log("found the residual (error feedback) on disk");
        return;
    } else if (*residual && first) {
        m_reporter.log("ignoring the residual on disk: it belongs to another model");
    }
    m_residual.assign(m_elements, 0.0f);
}

Status Uploader::take(const net::Task& task, const Theta& theta, const TaskOutcome& outcome)
{
    // The residual is in RAM only while a task is encoded: while the core
    // trains, the daemon holds no copy of it (docs/architecture.md, "A
    // volunteer's memory, per parameter").
    loadResidual();
    auto payload = encodeSubmission(theta, outcome);
    Status saved = payload ? saveFloats(m_folder.residualFile(), 0, m_manifestSha256, m_residual) : Status::success();
    std::vector<float>().swap(m_residual);
    if (!payload)
        return payload.error();
    if (!saved)
        return saved;
    PendingSubmission pending;
    pending.task = task;
    pending.payload = std::move(*payload);
    pending.sha256 = net::sha256Hex(pending.payload);
    pending.tokens = outcome.tokens;
    pending.computeMs = outcome.computeMs;
    pending.meanLoss = outcome.meanLoss;
    m_pending = std::move(pending);
    return Status::success();
}

// Delta = theta - local goes to the codec a chunk at a time, both read from
// their files when they are not in RAM (theta_v spilled while the core
// trained, the core's local weights): the residual, the payload and a chunk
// of each are all the daemon holds. A test's alteration of Delta needs it
// whole.
Result<std::string> Uploader::encodeSubmission(const Theta& theta, const TaskOutcome& outcome)
{
    const int64_t n = int64_t(m_elements);
    if ((theta.values.empty() && theta.file.empty()) || (!theta.values.empty() && theta.values.size() != m_elements)
        || (outcome.localFile.empty() && outcome.local.size() != m_elements))
        return Error::make(net::errc::kBadSize, "theta or the local weights are not of the project's size");
    if (m_alter) {
        TaskOutcome whole = outcome;
        if (Status loaded = loadLocalWeights(whole, m_elements); !loaded)
            return loaded.error();
        auto global = theta.values.empty() ? readFloatFile(theta.file, m_elements) : theta.values;
        if (!global)
            return global.error();
        std::vector<float> delta = diloco::pseudoGradient(global->data(), whole.local.data(), n);
        m_alter(delta);
        return m_sparse ? diloco::encodeSparse(*m_sparse, delta.data(), m_residual.data())
                        : diloco::encode(m_codec, delta.data(), n, m_residual.data());
    }
    std::optional<FloatFileReader> localFile, thetaFile;
    auto open = [&](const std::filesystem::path& path, std::optional<FloatFileReader>& reader) -> Status {
        auto opened = FloatFileReader::open(path, m_elements);
        if (!opened)
            return opened.error();
        reader.emplace(std::move(*opened));
        return Status::success();
    };
    if (!outcome.localFile.empty())
        if (Status opened = open(outcome.localFile, localFile); !opened)
            return opened.error();
    if (theta.values.empty())
        if (Status opened = open(theta.file, thetaFile); !opened)
            return opened.error();
    diloco::SubmissionEncoder encoder(
        m_sparse ? diloco::Codec::Sparse : m_codec, m_sparse ? &*m_sparse : nullptr, n, m_residual.data());
    const std::size_t chunkElements = std::size_t(std::min<int64_t>(n, kTakeChunkElements));
    std::vector<float> localChunk(localFile ? chunkElements : 0), thetaChunk(thetaFile ? chunkElements : 0);
    std::vector<float> spare(localFile || thetaFile ? 0 : chunkElements); // Delta's, when neither is read
    net::Sha256 thetaSha; // a spilled theta is checked as it is read
    while (encoder.next() < n) {
        const int64_t first = encoder.next();
        const int64_t count = std::min<int64_t>(kTakeChunkElements, n - first);
        const float* local = outcome.local.data() + first;
        const float* global = theta.values.data() + first;
        if (localFile) {
            if (Status read = localFile->read(localChunk.data(), uint64_t(count)); !read)
                return read.error();
            local = localChunk.data();
        }
        if (thetaFile) {
            if (Status read = thetaFile->read(thetaChunk.data(), uint64_t(count)); !read)
                return read.error();
            thetaSha.update(thetaChunk.data(), std::size_t(count) * sizeof(float));
            global = thetaChunk.data();
        }
        float* scratch = localFile ? localChunk.data() : thetaFile ? thetaChunk.data() : spare.data();
        if (Status added = encoder.add(global, local, count, scratch); !added)
            return added.error();
    }
    if (thetaFile && thetaSha.finishHex() != theta.sha256)
        return Error::make(net::errc::kIoError,
            theta.file.string() + " no longer holds theta version " + std::to_string(theta.version)
                + " (SHA-256 differs)");
    return encoder.finish();
}

Status Uploader::reject(const Error& why)
{
    // The round moved on or the server forgot the task (it restarted, or
    // counted us gone): not a verdict on the work, so not a rejection.
    if (why.code == net::errc::kStaleVersion || why.code == net::errc::kUnknownTask)
        return drop((why.code + " (" + why.message + ")").c_str());
    AgentSummary& summary = m_reporter.summary();
    ++summary.tasks;
    ++summary.rejected;
    m_reporter.log("task %llu rejected: %s (%s)", static_cast<unsigned long long>(m_pending->task.taskId),
        why.code.c_str(), why.message.c_str());
    m_pending.reset();
    return Status::success();
}

// A submit is not repeatable (docs/protocol.md): once one went out
// unanswered, the coordinator no longer knowing the task can also mean it
// accepted it before the reply was lost.
Status Uploader::drop(const char* why)
{
    const auto taskId = static_cast<unsigned long long>(m_pending->task.taskId);
    if (m_pending->submitUnanswered) {
        ++m_reporter.summary().unconfirmed;
        m_reporter.log("task %llu unconfirmed: %s after a submit that got no answer; the coordinator may have "
                       "accepted it (my_stats has its count)",
            taskId, why);
    } else {
        ++m_reporter.summary().dropped;
        m_reporter.log("task %llu dropped: %s", taskId, why);
    }
    m_pending.reset();
    return Status::success();
}

Status Uploader::submit()
{
    PendingSubmission& pending = *m_pending;
    if (m_session.serverVersion() != pending.task.version)
        return drop(
            ("version " + std::to_string(pending.task.version) + " was closed before it could be submitted").c_str());
    m_reporter.setPhase(AgentPhase::Uploading);
    const net::JoinReply& join = m_session.joinReply();
    const uint64_t chunkBytes = join.chunkBytes >= 1 && join.chunkBytes <= net::kMaxChunkBytes
        ? join.chunkBytes
        : uint64_t(net::kDefaultChunkBytes);
    const uint64_t chunks = net::chunkCountFor(pending.payload.size(), chunkBytes);
    // A server may ask for an earlier chunk again (it lost an upload across
    // a reconnect); bound the walk so a confused server cannot loop us.
    for (uint64_t sent = 0; pending.nextChunk < chunks; ++sent) {
        if (m_stop.load())
            return Error::make(net::errc::kCancelled, "stopped during the upload");
        if (sent > 2 * chunks + 2)
            return reject(Error::make(net::errc::kUploadStalled, "the server does not take the upload's chunks"));
        const uint64_t index = pending.nextChunk;
        net::UploadChunkRequest request{m_session.project(), join.session, pending.task.taskId, index,
            pending.payload.substr(std::size_t(index * chunkBytes), std::size_t(chunkBytes))};
        auto reply = m_session.call<net::UploadChunkReply>(request, m_session.transferTimeoutMs());
        if (!reply)
            return dropsSubmission(reply.error()) ? reject(reply.error()) : Status(reply.error());
        if (reply->nextIndex > chunks)
            return reject(Error::make(net::errc::kMalformed,
                "the server expects chunk " + std::to_string(reply->nextIndex) + " of " + std::to_string(chunks)));
        pending.nextChunk = reply->nextIndex;
    }
    net::SubmitRequest submit;
    submit.project = m_session.project();
    submit.session = join.session;
    submit.taskId = pending.task.taskId;
    submit.round = pending.task.round;
    submit.version = pending.task.version;
    submit.tokens = pending.tokens;
    submit.computeMs = uint64_t(pending.computeMs + 0.5);
    submit.trainLoss = pending.meanLoss;
    submit.codec = std::string(diloco::codecName(m_codec));
    submit.elements = m_elements;
    submit.totalBytes = pending.payload.size();
    submit.chunks = chunks;
    submit.sha256 = pending.sha256;
    auto reply = m_session.call<net::SubmitReply>(submit, m_session.submitTimeoutMs());
    if (!reply) {
        // No answer: the task stays valid across a re-join, so the submit
        // is sent again (its chunks are still on the server).
        if (isConnectionError(reply.error()) && reply.error().code != net::errc::kSendFailed)
            pending.submitUnanswered = true;
        return dropsSubmission(reply.error()) ? reject(reply.error()) : Status(reply.error());
    }
    AgentSummary& summary = m_reporter.summary();
    ++summary.tasks;
    ++summary.accepted;
    m_reporter.log("task %llu accepted: round %llu, %llu tokens, %llu bytes uploaded in %llu chunks",
        static_cast<unsigned long long>(pending.task.taskId), static_cast<unsigned long long>(reply->round),
        static_cast<unsigned long long>(pending.tokens), static_cast<unsigned long long>(pending.payload.size()),
        static_cast<unsigned long long>(chunks));
    m_pending.reset();
    return Status::success();
}

} // namespace crowdtrain::volunteer
