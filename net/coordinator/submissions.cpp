#include "net/coordinator/submissions.h"

#include "core/clock.h"
#include "core/file_io.h"
#include "core/slow_work.h"
#include "engine/error_codes.h"
#include "net/transfer/sha256.h"
#include "net/wire/error_codes.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <random>
#include <tuple>
#include <unistd.h>

namespace crowdtrain::coordinator {
namespace {

Status writeChunk(const std::filesystem::path& file, uint64_t offset, std::string_view bytes, bool truncate)
{
    const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (truncate ? O_TRUNC : 0), 0600);
    if (fd < 0)
        return core::ioError("cannot open", file);
    Status written = core::writeAt(fd, offset, bytes, file);
    ::close(fd);
    return written;
}

Status syncFile(const std::filesystem::path& file)
{
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return core::ioError("cannot open", file);
    const bool ok = ::fsync(fd) == 0;
    const int error = errno;
    ::close(fd);
    return ok ? Status::success() : core::ioError("cannot sync", file, error);
}

std::string pendingStem(int64_t round, uint64_t taskId)
{
    return "r" + std::to_string(round) + "-t" + std::to_string(taskId);
}

} // namespace

Submissions::Submissions(const ProjectSpec& spec, diloco::Codec codec, int64_t parameters,
    const diloco::SparseLayout* sparse, ProjectStore& store, DataPlan& plan, TaskBoard& tasks, RoundState& round,
    ProjectWorker& worker, std::function<void(uint64_t)> endTask)
    : m_spec(spec)
    , m_codec(codec)
    , m_parameters(parameters)
    , m_sparse(sparse)
    , m_payloadBytes(uint64_t(sparse ? sparse->messageBytes() : diloco::encodedBytes(codec, parameters)))
    , m_store(store)
    , m_plan(plan)
    , m_tasks(tasks)
    , m_round(round)
    , m_endTask(std::move(endTask))
    , m_worker(worker)
{
    // No honest AdamW run of H steps moves the weights further than the
    // ceiling; a pseudo-gradient a millionth of it is no training at all.
    diloco::NormGate::Options gate;
    gate.absoluteMax = diloco::adamNormCeiling(parameters, spec.inner.steps, spec.inner.learningRate);
    gate.absoluteMin = gate.absoluteMax * 1e-6;
    m_gate = diloco::NormGate(gate);
    m_defences = spec.trust.defences;
    m_trust = KeyTrust(spec.trust.keys, m_defences ? spec.trust.newKeyShare : 1.0);
    m_round.setFreshScale([this](double established, double fresh) { return m_trust.freshScale(established, fresh); });
    if (sparse)
        m_round.setSparseNorm([this] { return sparseNorm(); });
    // An AdamW step moves a weight by about lr at most: H steps by H * lr;
    // twice that is the ceiling, as for the norm. A sparse message is the
    // top k of an error-feedback buffer that keeps decay x what was not
    // sent: an element can gather up to 1 / (1 - decay) times that.
    const double perElement = 2.0 * double(spec.inner.steps) * spec.inner.learningRate;
    if (!m_defences)
        m_elementCeiling = 0;
    else if (!sparse)
        m_elementCeiling = perElement;
    else if (spec.sparse.decay < 1.0)
        m_elementCeiling = perElement / (1.0 - spec.sparse.decay);
    // Positions a copier cannot know: drawn anew at each start (the open
    // round's sketches are made again when its submissions are replayed).
    if (!sparse)
        m_sketchPositions = PayloadSketch::positions(parameters, std::random_device{}());
    if (spec.trust.calibrate && m_defences)
        m_calibration = std::make_unique<HostCalibration>(spec, parameters, sparse);
    if (spec.trust.evaluateRate > 0 && m_defences)
        m_scorer = std::make_unique<SubmissionScorer>(spec, codec, sparse);
}

std::filesystem::path Submissions::pendingDir() const
{
    return m_store.dir() / "pending";
}

void Submissions::takeDirection()
{
    const std::vector<float>& momentum = m_round.momentum();
    m_direction = momentum.empty() ? nullptr : momentum.data();
    double sum = 0;
    for (float v : momentum)
        sum += double(v) * double(v);
    m_directionNorm = std::sqrt(sum);
}

void Submissions::closeBegins()
{
    for (const auto& [id, task] : m_tasks.tasks())
        if (task.checks)
            task.checks->dropReference();
}

// The chunks a volunteer sent before a restart stay: the whole ones are
// hashed and inspected again, a torn last one is cut off, and the volunteer
// is told to go on from there (upload_chunk answers the next index).
Status Submissions::resumeUpload(OpenTask& task)
{
    std::error_code ec;
    const uint64_t onDisk
        = std::filesystem::exists(task.uploadFile, ec) ? std::filesystem::file_size(task.uploadFile, ec) : 0;
    if (ec)
        return Error::make(net::errc::kIoError, "cannot read " + task.uploadFile.string() + ": " + ec.message());
    const uint64_t chunk = net::kDefaultChunkBytes;
    const uint64_t keep = onDisk >= m_payloadBytes ? m_payloadBytes : onDisk / chunk * chunk;
    if (keep == 0) {
        std::filesystem::remove(task.uploadFile, ec);
        return Status::success();
    }
    std::filesystem::resize_file(task.uploadFile, keep, ec);
    if (ec)
        return Error::make(net::errc::kIoError, "cannot truncate " + task.uploadFile.string() + ": " + ec.message());
    auto checks = std::make_shared<UploadChecks>(m_codec, m_parameters, direction(), m_sparse);
    const Status read = core::forEachSlice(task.uploadFile, [&](std::string_view slice) {
        checks->sha.update(slice);
        checks->feed(slice);
        return Status::success();
    });
    if (!read)
        return read;
    task.checks = std::move(checks);
    task.receivedBytes = keep;
    task.nextChunk = net::chunkCountFor(keep, chunk);
    return Status::success();
}

// A task leased ahead is trained from the version the open round will make;
// its payload means nothing before that version exists.
Error Submissions::aheadTooEarly(const OpenTask& task) const
{
    return Error::make(net::errc::kStaleVersion,
        "task " + std::to_string(task.lease.id)
            + " is for the round after the open one: upload and submit it from version "
            + std::to_string(m_round.version() + 1));
}

Result<net::UploadChunkReply> Submissions::uploadChunk(
    const std::string& key, const net::UploadChunkRequest& request, int64_t nowMs)
{
    OpenTask* found = m_tasks.find(request.taskId, key);
    if (!found)
        return Error::make(
            net::errc::kUnknownTask, "task " + std::to_string(request.taskId) + " is not yours or has ended");
    OpenTask& task = *found;
    if (task.ahead)
        return aheadTooEarly(task);
    const uint64_t expected = m_payloadBytes;
    if (request.index != task.nextChunk) // a repeat or a gap: say where to go on
        return net::UploadChunkReply{request.taskId, task.nextChunk, task.receivedBytes};
    if (task.receivedBytes + request.data.size() > expected
        || (request.data.size() != net::kDefaultChunkBytes && task.receivedBytes + request.data.size() != expected))
        return Error::make(net::errc::kBadShape,
            "chunk " + std::to_string(request.index) + " of " + std::to_string(request.data.size())
                + " bytes does not fit a payload of " + std::to_string(expected) + " bytes in chunks of "
                + std::to_string(net::kDefaultChunkBytes));
    if (Status s = writeChunk(task.uploadFile, task.receivedBytes, request.data, request.index == 0); !s)
        return s.error();
    if (request.index == 0) {
        task.checks = std::make_shared<UploadChecks>(m_codec, m_parameters, direction(), m_sparse);
        if (m_round.closing()) // begun without the direction: its check is skipped (closeBegins)
            task.checks->dropReference();
    }
    task.checks->sha.update(request.data);
    task.checks->feed(request.data);
    task.receivedBytes += request.data.size();
    ++task.nextChunk;
    task.lastUploadMs = nowMs;
    if (request.index == 0)
        task.firstUploadMs = nowMs;
    return net::UploadChunkReply{request.taskId, task.nextChunk, task.receivedBytes};
}

void Submissions::submit(const std::string& key, const net::SubmitRequest& request, int64_t nowMs, SubmitDone done)
{
    auto verdict = check(key, request, nowMs, done);
    if (done) // not handed to an acceptance
        done(std::move(verdict));
}

// The verdict, unless the submission passed and `done` went with its
// acceptance (then `done` is empty and the result means nothing).
Result<net::SubmitReply> Submissions::check(
    const std::string& key, const net::SubmitRequest& request, int64_t nowMs, SubmitDone& done)
{
    OpenTask* found = m_tasks.find(request.taskId, key);
    if (!found) {
        const core::SlowPart part("finding an earlier acceptance");
        return resubmission(key, request);
    }
    if (found->ahead)
        return aheadTooEarly(*found);
    if (found->accepting) { // sent again before the first one's answer: the same answer
        auto first = std::find_if(m_accepting.begin(), m_accepting.end(),
            [&](const Accepting& a) { return a.accepted.record.taskId == request.taskId; });
        if (first == m_accepting.end())
            return Error::make(net::errc::kInternal, "task " + std::to_string(request.taskId) + " is being accepted");
        first->waiting.push_back(std::move(done));
        done = nullptr;
        return Error::make(net::errc::kInternal, "answered with the first submit");
    }
    const OpenTask task = *found;
    {
        const core::SlowPart part("the host's calibration");
        takeCalibration(false);
    }
    auto refuse = [&](Error why) -> Result<net::SubmitReply> {
        const core::SlowPart part("recording a refusal");
        m_endTask(request.taskId);
        if (Status s = reject(key, task, request, why, nowMs); !s)
            return s.error();
        return why;
    };
    const int64_t version = m_round.version();
    if (int64_t(request.version) != version || int64_t(request.round) != version + 1)
        return refuse(Error::make(net::errc::kStaleVersion,
            "the submission is for round " + std::to_string(request.round) + " from version "
                + std::to_string(request.version) + "; the open round is " + std::to_string(version + 1)
                + ", from version " + std::to_string(version)));
    const uint64_t expected = m_payloadBytes;
    if (request.codec != diloco::codecName(m_codec) || int64_t(request.elements) != m_parameters
        || request.totalBytes != expected)
        return refuse(Error::make(net::errc::kBadShape,
            "expected " + std::string(diloco::codecName(m_codec)) + " of " + std::to_string(m_parameters)
                + " elements (" + std::to_string(expected) + " bytes), got " + request.codec + " of "
                + std::to_string(request.elements) + " elements (" + std::to_string(request.totalBytes) + " bytes)"));
    if (task.receivedBytes != expected || request.chunks != task.nextChunk)
        return refuse(Error::make(net::errc::kBadShape,
            "uploaded " + std::to_string(task.receivedBytes) + " of " + std::to_string(expected) + " bytes in "
                + std::to_string(task.nextChunk) + " chunks; the submission announces " + std::to_string(request.chunks)
                + " chunks"));
    if (request.tokens == 0 || request.tokens > task.tokens)
        return refuse(Error::make(net::errc::kBadTokens,
            "tokens must be 1.." + std::to_string(task.tokens) + " for this task, got "
                + std::to_string(request.tokens)));
    // Every chunk was hashed and inspected on arrival (in order: a chunk is
    // taken only at nextChunk, and chunk 0 starts over).
    if (!task.checks)
        return refuse(Error::make(net::errc::kBadShape, "nothing was uploaded"));
    // On copies: a submit that fails on this side (a full disk) may be sent again.
    const std::string sha = net::Sha256(task.checks->sha).finishHex();
    if (sha != request.sha256)
        return refuse(Error::make(net::errc::kChecksumMismatch, "the uploaded payload's SHA-256 is " + sha));
    PayloadSketch sketch;
    auto stats = inspectUpload(task, sketch);
    if (!stats)
        return refuse(stats.error());
    if (!stats->finite)
        return refuse(Error::make(net::errc::kNonFinite, "the pseudo-gradient holds NaN or infinite values"));
    const double cutScale = m_sparse ? 1.0 : std::sqrt(double(task.tokens) / double(request.tokens));
    if (auto why = m_defences ? checkElements(*stats, cutScale) : std::nullopt)
        return refuse(*why);
    if (auto why = m_defences ? checkCopy(sha, sketch) : std::nullopt)
        return refuse(*why);
    // A task cut short by a wrap-up moved the weights less: the gate compares
    // norms scaled to a whole task, by sqrt (Adam steps add up between
    // sqrt(k) for noise and k for a steady direction), so that neither a
    // whole task among cut ones nor a cut one among whole ones looks odd.
    // Not a sparse message: it is the top k of the volunteer's error-feedback
    // buffer, whose residual from earlier rounds does not shrink with the
    // task, so scaling would push an honest cut message over the bounds.
    double gateNorm = stats->l2Norm * cutScale;
    std::optional<double> cosine;
    if (direction() && stats->l2Norm > 0 && !task.checks->referenceDropped())
        cosine = stats->dot / (stats->l2Norm * m_directionNorm);
    // Established keys are held to this round's direction only: the
    // previous round's cosines were measured against another momentum, and
    // an outer step that overshoots turns honest updates against it.
    auto gated = [&] {
        const core::SlowPart part("the norm gate");
        const bool fresh = !m_trust.established(key);
        auto why = m_gate.check(gateNorm, cosine, fresh);
        // Late in training a task's steps add up nearly in a line (one step
        // of 100 moved 1/68 as far as the whole task on the attack bench), so
        // a cut task scaled by sqrt looked too small: a cut task too small by
        // sqrt is judged again scaled linearly (the most its steps can add
        // up to). Its weight in the round is its few tokens' all the same.
        if (why && cutScale > 1 && why->starts_with(std::string(engine::errc::kNormTooSmall) + ":")) {
            const double linear = stats->l2Norm * cutScale * cutScale;
            if (!m_gate.check(linear, cosine, fresh)) {
                gateNorm = linear;
                why.reset();
            }
        }
        return why;
    }();
    if (auto why = gated) {
        const bool direction = why->starts_with("direction");
        // Statistics that refuse established keys again and again, with
        // nothing accepted between, came from keys that are gone (they set
        // them while they had trust, then left): forgotten, so that the next
        // submission is judged by the absolute bounds and sets them again.
        // New keys' refusals never count: a swarm of them would reset it.
        if (!direction && m_trust.established(key) && why->find(" x median ") != std::string::npos
            && ++m_referenceRejections >= kStaleReferenceRejections) {
            restoreGate({}); // the host's calibration stays
            m_referenceRejections = 0;
            std::fprintf(stderr,
                "%s: round %lld: %d refusals of established keys on the norm reference in a row; the reference "
                "is forgotten\n",
                m_spec.name.c_str(), static_cast<long long>(m_round.openRound()), kStaleReferenceRejections);
        }
        // A reference carried over from the previous round that refuses
        // every update of this one (volunteers whose fresh optimizer states
        // align less with the momentum, say) would stall the project: after
        // kStaleDirectionRejections refusals with nothing accepted, only
        // this round's own submissions set the direction.
        if (direction && m_round.accepted().empty() && ++m_directionRejections >= kStaleDirectionRejections) {
            m_gate.forgetPreviousDirections();
            std::fprintf(stderr,
                "%s: round %lld: %d updates refused on direction with none accepted; the previous "
                "round's direction no longer counts\n",
                m_spec.name.c_str(), static_cast<long long>(m_round.openRound()), m_directionRejections);
        }
        return refuse(Error::make(direction ? net::errc::kDirectionOutOfBounds : net::errc::kNormOutOfBounds, *why));
    }
    const core::SlowPart part("handing the acceptance to the worker");
    accept(key, *found, request, {gateNorm, cosine}, std::move(sketch), nowMs, std::move(done));
    done = nullptr;
    return Error::make(net::errc::kInternal, "answered when durable");
}

// The decoded payload's norms, from what the chunks' inspection gathered as
// they came; a sparse message's bits that break the format (an index
// outside its chunk or repeated, say) are bad_shape.
Result<diloco::PayloadStats> Submissions::inspectUpload(const OpenTask& task, PayloadSketch& sketch) const
{
    if (!m_sparse) {
        if (!task.checks->inspected)
            return task.checks->inspected.error();
        const core::SlowPart part("sketching the upload");
        auto sketched = PayloadSketch::ofDense(m_codec, task.uploadFile, m_sketchPositions);
        if (!sketched)
            return sketched.error();
        sketch = std::move(*sketched);
        return diloco::StreamInspector(task.checks->inspector).finish();
    }
    // Walked chunk by chunk as they came (UploadChecks::feed).
    auto stats = task.checks->inspected ? task.checks->sparseInspector->finish()
                                        : Result<diloco::PayloadStats>(task.checks->inspected.error());
    if (stats)
        sketch = task.checks->sketch;
    if (!stats && stats.error().code != net::errc::kNonFinite)
        return Error::make(net::errc::kBadShape, stats.error().code + ": " + stats.error().message);
    return stats;
}

// A submit of a task that is no longer open: when this key's submission of
// it, with the same payload, was accepted (its reply was lost, say), the
// answer is "accepted" again, in whatever round that was; else unknown_task.
Result<net::SubmitReply> Submissions::resubmission(const std::string& key, const net::SubmitRequest& request)
{
    auto accepted = m_store.ledger().acceptedTask(request.taskId);
    if (!accepted)
        return accepted.error();
    if (*accepted && (*accepted)->publicKey == key && (*accepted)->payloadSha256 == request.sha256)
        return net::SubmitReply{request.taskId, uint64_t((*accepted)->round), uint64_t((*accepted)->round - 1)};
    return Error::make(
        net::errc::kUnknownTask, "task " + std::to_string(request.taskId) + " is not yours or has ended");
}

Status Submissions::reject(
    const std::string& key, const OpenTask& task, const net::SubmitRequest& request, const Error& why, int64_t nowMs)
{
    ContributionRecord record;
    record.round = m_round.openRound();
    record.publicKey = key;
    record.tokens = int64_t(request.tokens);
    record.computeMs = creditedComputeMs(task, request, nowMs);
    record.trainLoss = request.trainLoss;
    record.accepted = false;
    record.reason = why.code + ": " + why.message;
    ++m_refusals[why.code];
    record.submittedAtMs = nowMs;
    return m_store.ledger().recordRejection(record);
}

// A volunteer's compute_ms is credited up to the time its task has been
// out (one task at a time per key), so that nobody's GPU-hours on the
// leaderboard can exceed the wall-clock time it held work.
int64_t Submissions::creditedComputeMs(const OpenTask& task, const net::SubmitRequest& request, int64_t nowMs) const
{
    const int64_t leasedAtMs = task.lease.deadlineMs - m_spec.round.deadlineSeconds * 1000;
    const int64_t held = std::max<int64_t>(0, nowMs - leasedAtMs);
    return int64_t(std::min<uint64_t>(request.computeMs, uint64_t(held)));
}

struct Submissions::Durable {
    std::filesystem::path upload, payload, record;
    std::string recordJson;
    ContributionRecord contribution;
    AcceptedSubmission accepted;
    diloco::Codec codec;
    // To score it against (trust.evaluate), when drawn; else null.
    std::shared_ptr<const std::vector<float>> theta;
    int64_t version = 0;
};

// On the worker. Payload first (fsynced, renamed), then its record: a record
// on disk always has its payload; then its ledger row and the aggregate.
// Until its ledger row is in, a failure puts the upload back (and removes
// the record), so that the submit can be sent again.
Status Submissions::makeDurable(const Durable& d, bool evaluated)
{
    if (m_fault)
        m_fault("accept-begun", d.contribution.round);
    if (Status s = syncFile(d.upload); !s)
        return s;
    std::error_code ec;
    std::filesystem::rename(d.upload, d.payload, ec);
    if (ec)
        return Error::make(net::errc::kIoError, "cannot move " + d.upload.string() + ": " + ec.message());
    std::string recordJson = d.recordJson;
    if (evaluated) {
        nlohmann::json record = nlohmann::json::parse(recordJson);
        record["evaluated"] = true;
        recordJson = record.dump();
    }
    if (Status s = core::writeFileAtomic(d.record, recordJson); !s) {
        std::filesystem::rename(d.payload, d.upload, ec);
        return s;
    }
    // Without its ledger row the record must go too: a restart would
    // replay as accepted what the volunteer was told failed.
    const auto unrecord = [&] {
        std::filesystem::remove(d.record, ec);
        std::filesystem::rename(d.payload, d.upload, ec);
    };
    auto ledger = m_round.workerLedger();
    if (!ledger) {
        unrecord();
        return ledger.error();
    }
    if (Status s = (*ledger)->recordContribution(d.contribution); !s) {
        unrecord();
        return s;
    }
    if (Status s = m_round.sum(d.accepted, d.payload, d.codec); !s)
        return s;
    if (m_fault)
        m_fault("accept-durable", d.contribution.round);
    return Status::success();
}

// The submission passed: its acceptance goes to the worker, and `done` hears
// when the loop collects it.
void Submissions::accept(const std::string& key, OpenTask& task, const net::SubmitRequest& request, GateStats gate,
    PayloadSketch sketch, int64_t nowMs, SubmitDone done)
{
    // Task ids are never reused, so the stem is new; never overwrite an
    // accepted submission all the same.
    std::string stem = pendingStem(m_round.openRound(), task.lease.id);
    for (int k = 1; std::filesystem::exists(pendingDir() / (stem + ".json"))
         || std::filesystem::exists(pendingDir() / (stem + ".bin"));
         ++k)
        stem = pendingStem(m_round.openRound(), task.lease.id) + "-" + std::to_string(k);
    const int64_t computeMs = creditedComputeMs(task, request, nowMs);
    const bool fresh = !m_trust.established(key);
    const double clip = clipOf(gate.norm);
    nlohmann::json record = {{"round", m_round.openRound()}, {"version", m_round.version()}, {"task", task.lease.id},
        {"range", task.lease.range}, {"key", key}, {"tokens", request.tokens}, {"compute_ms", computeMs},
        {"train_loss", request.trainLoss}, {"norm", gate.norm}, {"submitted_at_ms", nowMs}, {"sha256", request.sha256},
        {"fresh", fresh}, {"clip", clip}};
    if (gate.cosine)
        record["cosine"] = *gate.cosine;
    ContributionRecord contribution{m_round.openRound(), key, int64_t(request.tokens), computeMs, request.trainLoss,
        true, "", nowMs, task.lease.id, request.sha256};
    const AcceptedSubmission accepted{
        contribution, task.lease.range, gate, fresh, clip, pendingDir() / (stem + ".bin")};
    auto durable = std::make_shared<Durable>(Durable{task.uploadFile, accepted.payload, pendingDir() / (stem + ".json"),
        record.dump(), contribution, accepted, m_codec, nullptr, 0});
    if (m_scorer && m_scorer->draw()) {
        durable->theta = m_round.sharedParams();
        durable->version = m_round.version();
    }
    task.accepting = true;
    Accepting& a = m_accepting.emplace_back(Accepting{accepted, std::move(sketch), {}, {}});
    a.waiting.push_back(std::move(done));
    a.durable = m_worker.post([this, durable, honest = honestChange()]() -> Verdict {
        try {
            return acceptOnWorker(*durable, honest);
        } catch (const std::exception& e) {
            return Verdict{Error::make(net::errc::kInternal, e.what()), std::nullopt, std::nullopt};
        }
    });
}

namespace {

std::string change(double value)
{
    char text[32];
    std::snprintf(text, sizeof text, "%+.4g", value);
    return text;
}

} // namespace

// On the worker: the score first, when drawn (a refusal writes nothing),
// then the durable half. A score that fails (the validation split cannot
// be read) is logged and the submission is judged without it.
Submissions::Verdict Submissions::acceptOnWorker(const Durable& d, std::optional<double> honest)
{
    Verdict verdict;
    if (d.theta && m_scorer) {
        auto score = m_scorer->score(d.version, *d.theta, d.upload);
        if (!score) {
            std::fprintf(stderr, "%s: task %llu could not be scored: %s\n", m_spec.name.c_str(),
                static_cast<unsigned long long>(d.contribution.taskId), score.error().message.c_str());
        } else {
            verdict.score = *score;
            const double bound = lossBound(honest, score->before);
            if (score->change() > bound) {
                verdict.refused = Error::make(net::errc::kLossOutOfBounds,
                    "applied alone, this update moves the loss on " + std::to_string(m_spec.trust.evaluateTokens)
                        + " held-out tokens the coordinator drew from " + std::to_string(score->before) + " to "
                        + std::to_string(score->after) + " (" + change(score->change()) + "), above the bound "
                        + change(bound)
                        + (honest ? " (honest updates' median " + change(*honest) + ")"
                                  : std::string(" (no honest score yet)")));
                return verdict;
            }
        }
    }
    verdict.durable = makeDurable(d, verdict.score.has_value());
    return verdict;
}

double Submissions::lossBound(std::optional<double> honest, double loss)
{
    const double floor = kLossRiseShare * std::abs(loss);
    return honest ? std::max(floor, *honest + std::max(std::abs(*honest), floor)) : floor;
}

// r: the median change of the established keys' passed scores, this round
// and the previous one (new keys never set it).
std::optional<double> Submissions::honestChange() const
{
    std::vector<double> changes = m_roundChanges;
    changes.insert(changes.end(), m_previousChanges.begin(), m_previousChanges.end());
    if (changes.empty())
        return std::nullopt;
    std::sort(changes.begin(), changes.end());
    const std::size_t mid = changes.size() / 2;
    return changes.size() % 2 ? changes[mid] : (changes[mid - 1] + changes[mid]) / 2.0;
}

// A submission refused on its score: as any refusal (its task ends, a
// rejection recorded, no credit), and its key's trust is halved.
void Submissions::refusedOnScore(const AcceptedSubmission& a, const Error& why)
{
    const uint64_t taskId = a.record.taskId;
    if (OpenTask* task = m_tasks.find(taskId, a.record.publicKey))
        task->accepting = false;
    m_endTask(taskId);
    ContributionRecord record = a.record;
    record.accepted = false;
    record.reason = why.code + ": " + why.message;
    record.taskId = 0;
    record.payloadSha256.clear();
    ++m_refusals[why.code];
    ++m_roundScoreRefusals;
    if (Status s = m_store.ledger().recordRejection(record); !s)
        std::fprintf(stderr, "%s: task %llu: %s\n", m_spec.name.c_str(), static_cast<unsigned long long>(taskId),
            s.error().message.c_str());
    m_trust.penalize(a.record.publicKey);
    std::fprintf(stderr, "%s: round %lld: task %llu of %.12s refused on its held-out score: %s\n", m_spec.name.c_str(),
        static_cast<long long>(m_round.openRound()), static_cast<unsigned long long>(taskId),
        a.record.publicKey.c_str(), why.message.c_str());
}

void Submissions::collectAccepted(bool wait)
{
    while (!m_accepting.empty()) {
        Accepting& a = m_accepting.front();
        if (!wait && a.durable.wait_for(std::chrono::seconds(0)) != std::future_status::ready)
            return;
        Verdict outcome = a.durable.get();
        const Status& durable = outcome.durable;
        const uint64_t taskId = a.accepted.record.taskId;
        if (outcome.score) {
            ++m_roundScored;
            m_roundScoreMs += outcome.score->ms;
        }
        if (outcome.refused) {
            refusedOnScore(a.accepted, *outcome.refused);
            std::vector<SubmitDone> waiting = std::move(a.waiting);
            const Error why = *outcome.refused;
            m_accepting.pop_front();
            for (SubmitDone& done : waiting)
                if (done)
                    done(why);
            continue;
        }
        if (durable && outcome.score && m_trust.established(a.accepted.record.publicKey))
            m_roundChanges.push_back(outcome.score->change());
        Result<net::SubmitReply> verdict = durable
            ? Result<net::SubmitReply>(
                net::SubmitReply{taskId, uint64_t(a.accepted.record.round), uint64_t(a.accepted.record.round - 1)})
            : Result<net::SubmitReply>(durable.error());
        if (durable) {
            a.accepted.evaluated = outcome.score.has_value();
            m_round.noteAccepted(a.accepted);
            if (Status s = m_plan.complete(taskId); !s) // its lease expired meanwhile: the range is trained twice
                std::fprintf(stderr, "%s: task %llu: %s\n", m_spec.name.c_str(),
                    static_cast<unsigned long long>(taskId), s.error().message.c_str());
            m_tasks.forget(taskId);
            accepted(a.accepted, std::move(a.sketch));
        } else if (OpenTask* task = m_tasks.find(taskId, a.accepted.record.publicKey)) {
            task->accepting = false; // the submit may be sent again
        }
        std::vector<SubmitDone> waiting = std::move(a.waiting);
        m_accepting.pop_front();
        for (SubmitDone& done : waiting)
            if (done)
                done(verdict);
    }
}

namespace {

// A pending record that cannot be replayed: it and its payload are moved
// aside (NAME.bad-MS), kept for a person, with a notice; the server starts.
void setAsidePending(const std::filesystem::path& record, const std::string& why)
{
    const std::string suffix = ".bad-" + std::to_string(core::unixNowMs());
    for (const auto& file : {record, std::filesystem::path(record).replace_extension(".bin")}) {
        std::error_code ec;
        if (std::filesystem::exists(file, ec))
            std::filesystem::rename(file, file.string() + suffix, ec);
    }
    std::fprintf(stderr, "%s could not be replayed (%s); it was moved to %s%s\n", record.c_str(), why.c_str(),
        record.c_str(), suffix.c_str());
}

} // namespace

// After a restart: the accepted submissions of the open round, in the order
// they were accepted; anything of another round is stale and removed. A
// damaged record is set aside (setAsidePending) and the rest go on.
Status Submissions::replayPending()
{
    struct Pending {
        std::filesystem::path path;
        ContributionRecord contribution;
        uint32_t range = 0;
        GateStats gate;
        bool fresh = false;
        double clip = 1.0;
        bool evaluated = false;
    };
    std::vector<Pending> records;
    std::error_code listed;
    for (const auto& entry : std::filesystem::directory_iterator(pendingDir(), listed)) {
        const auto path = entry.path();
        if (path.extension() != ".json" || path.filename().string().starts_with("."))
            continue;
        auto text = core::readFile(path);
        if (!text) {
            setAsidePending(path, text.error().message);
            continue;
        }
        const nlohmann::json record = nlohmann::json::parse(*text, nullptr, false);
        if (record.is_discarded() || !record.is_object()) {
            setAsidePending(path, "not a JSON object");
            continue;
        }
        if (!record.contains("round") || record["round"] != m_round.openRound()) {
            std::error_code ec; // stale: of a round that closed
            std::filesystem::remove(path, ec);
            std::filesystem::remove(std::filesystem::path(path).replace_extension(".bin"), ec);
            continue;
        }
        try {
            Pending p{path, {}, record.at("range").get<uint32_t>(), {record.at("norm").get<double>(), std::nullopt}};
            if (record.contains("cosine"))
                p.gate.cosine = record.at("cosine").get<double>();
            p.contribution = ContributionRecord{m_round.openRound(), record.at("key").get<std::string>(),
                int64_t(record.at("tokens").get<double>()), record.at("compute_ms").get<int64_t>(),
                record.at("train_loss").get<double>(), true, "", record.value("submitted_at_ms", int64_t(0)),
                record.at("task").get<uint64_t>(), record.value("sha256", std::string())};
            p.fresh = record.value("fresh", !m_trust.established(p.contribution.publicKey));
            p.clip = record.value("clip", 1.0);
            p.evaluated = record.value("evaluated", false);
            records.push_back(std::move(p));
        } catch (const nlohmann::json::exception& e) {
            setAsidePending(path, e.what());
        }
    }
    if (listed)
        return Error::make(net::errc::kIoError, "cannot list " + pendingDir().string() + ": " + listed.message());
    std::sort(records.begin(), records.end(), [](const Pending& a, const Pending& b) {
        return std::tie(a.contribution.submittedAtMs, a.path) < std::tie(b.contribution.submittedAtMs, b.path);
    });
    for (Pending& p : records) {
        const auto payload = std::filesystem::path(p.path).replace_extension(".bin");
        const AcceptedSubmission accepted{p.contribution, p.range, p.gate, p.fresh, p.clip, payload, p.evaluated};
        if (Status s = m_round.add(accepted, payload, m_codec); !s) {
            setAsidePending(p.path, s.error().message);
            continue;
        }
        this->accepted(accepted, sketchOf(payload));
        (void)m_plan.completeRange(p.range);
    }
    return Status::success();
}

} // namespace crowdtrain::coordinator
