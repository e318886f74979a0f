// The submission path of a ProjectRuntime: chunked upload, checks, durable
// acceptance, and the replay of accepted submissions after a restart.

#include "net/coordinator/project_runtime.h"

#include "engine/atomic_file.h"
#include "net/coordinator/file_slices.h"
#include "net/transfer/sha256.h"

#include <cmath>
#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

namespace crowdtrain::coordinator {
namespace {

Status writeAt(const std::filesystem::path& file, uint64_t offset, std::string_view bytes, bool truncate)
{
    const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (truncate ? O_TRUNC : 0), 0600);
    if (fd < 0)
        return Error::make("io_error", "cannot open " + file.string());
    std::size_t done = 0;
    while (done < bytes.size()) {
        const ssize_t n = ::pwrite(fd, bytes.data() + done, bytes.size() - done, off_t(offset + done));
        if (n <= 0) {
            ::close(fd);
            return Error::make("io_error", "cannot write " + file.string() + " (disk full?)");
        }
        done += std::size_t(n);
    }
    ::close(fd);
    return Status::success();
}

Status syncFile(const std::filesystem::path& file)
{
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return Error::make("io_error", "cannot open " + file.string());
    const bool ok = ::fsync(fd) == 0;
    ::close(fd);
    return ok ? Status::success() : Error::make("io_error", "cannot sync " + file.string());
}

std::string pendingStem(int64_t round, uint64_t taskId)
{
    return "r" + std::to_string(round) + "-t" + std::to_string(taskId);
}

} // namespace

Result<net::UploadChunkReply> ProjectRuntime::uploadChunk(
    const std::string& key, const net::UploadChunkRequest& request)
{
    if (auto v = sessionOf(key, request.session); !v)
        return v.error();
    auto it = m_tasks.find(request.taskId);
    if (it == m_tasks.end() || it->second.lease.publicKey != key)
        return Error::make("unknown_task", "task " + std::to_string(request.taskId) + " is not yours or has ended");
    TaskState& task = it->second;
    const uint64_t expected = uint64_t(diloco::encodedBytes(m_codec, m_parameters));
    if (request.index != task.nextChunk) // a repeat or a gap: say where to go on
        return net::UploadChunkReply{request.taskId, task.nextChunk, task.receivedBytes};
    if (task.receivedBytes + request.data.size() > expected
        || (request.data.size() != net::kDefaultChunkBytes && task.receivedBytes + request.data.size() != expected))
        return Error::make("bad_shape",
            "chunk " + std::to_string(request.index) + " of " + std::to_string(request.data.size())
                + " bytes does not fit a payload of " + std::to_string(expected) + " bytes in chunks of "
                + std::to_string(net::kDefaultChunkBytes));
    if (Status s = writeAt(task.uploadFile, task.receivedBytes, request.data, request.index == 0); !s)
        return s.error();
    if (request.index == 0)
        task.checks = std::make_shared<UploadChecks>(m_codec, m_parameters);
    task.checks->sha.update(request.data);
    if (task.checks->inspected)
        task.checks->inspected = task.checks->inspector.feed(request.data);
    task.receivedBytes += request.data.size();
    ++task.nextChunk;
    return net::UploadChunkReply{request.taskId, task.nextChunk, task.receivedBytes};
}

Result<net::SubmitReply> ProjectRuntime::submit(
    const std::string& key, const net::SubmitRequest& request, int64_t nowMs)
{
    if (auto v = sessionOf(key, request.session); !v)
        return v.error();
    auto it = m_tasks.find(request.taskId);
    if (it == m_tasks.end() || it->second.lease.publicKey != key)
        return Error::make("unknown_task", "task " + std::to_string(request.taskId) + " is not yours or has ended");
    const TaskState task = it->second;
    auto refuse = [&](Error why) -> Result<net::SubmitReply> {
        dropTask(request.taskId, true);
        if (Status s = reject(key, task, request, why, nowMs); !s)
            return s.error();
        return why;
    };
    if (int64_t(request.version) != m_version || int64_t(request.round) != m_version + 1)
        return refuse(Error::make("stale_version",
            "the submission is for version " + std::to_string(request.version) + ", the round trains from version "
                + std::to_string(m_version)));
    const uint64_t expected = uint64_t(diloco::encodedBytes(m_codec, m_parameters));
    if (request.codec != diloco::codecName(m_codec) || int64_t(request.elements) != m_parameters
        || request.totalBytes != expected)
        return refuse(Error::make("bad_shape",
            "expected " + std::string(diloco::codecName(m_codec)) + " of " + std::to_string(m_parameters)
                + " elements (" + std::to_string(expected) + " bytes), got " + request.codec + " of "
                + std::to_string(request.elements) + " elements (" + std::to_string(request.totalBytes) + " bytes)"));
    if (task.receivedBytes != expected || request.chunks != task.nextChunk)
        return refuse(Error::make("bad_shape",
            "uploaded " + std::to_string(task.receivedBytes) + " of " + std::to_string(expected) + " bytes in "
                + std::to_string(task.nextChunk) + " chunks; the submission announces " + std::to_string(request.chunks)
                + " chunks"));
    if (request.tokens == 0 || request.tokens > task.tokens)
        return refuse(Error::make("bad_tokens",
            "tokens must be 1.." + std::to_string(task.tokens) + " for this task, got "
                + std::to_string(request.tokens)));
    // Every chunk was hashed and inspected on arrival (in order: a chunk is
    // taken only at nextChunk, and chunk 0 starts over).
    if (!task.checks)
        return refuse(Error::make("bad_shape", "nothing was uploaded"));
    // On copies: a submit that fails on this side (a full disk) may be sent again.
    const std::string sha = net::Sha256(task.checks->sha).finishHex();
    if (sha != request.sha256)
        return refuse(Error::make("checksum_mismatch", "the uploaded payload's SHA-256 is " + sha));
    if (!task.checks->inspected)
        return refuse(task.checks->inspected.error());
    auto stats = diloco::StreamInspector(task.checks->inspector).finish();
    if (!stats)
        return refuse(stats.error());
    if (!stats->finite)
        return refuse(Error::make("non_finite", "the pseudo-gradient holds NaN or infinite values"));
    // A task cut short by a wrap-up moved the weights less: the gate compares
    // norms scaled to a whole task, by sqrt (Adam steps add up between
    // sqrt(k) for noise and k for a steady direction), so that neither a
    // whole task among cut ones nor a cut one among whole ones looks odd.
    const double gateNorm = stats->l2Norm * std::sqrt(double(task.tokens) / double(request.tokens));
    if (auto why = m_normGate.check(gateNorm))
        return refuse(Error::make("norm_out_of_bounds", *why));
    if (Status s = acceptDurably(key, task, request, gateNorm, nowMs); !s)
        return s.error();
    return net::SubmitReply{request.taskId, request.round, request.version};
}

Status ProjectRuntime::reject(
    const std::string& key, const TaskState&, const net::SubmitRequest& request, const Error& why, int64_t nowMs)
{
    ContributionRecord record;
    record.round = m_version + 1;
    record.publicKey = key;
    record.tokens = int64_t(request.tokens);
    record.computeMs = int64_t(request.computeMs);
    record.trainLoss = request.trainLoss;
    record.accepted = false;
    record.reason = why.code + ": " + why.message;
    record.submittedAtMs = nowMs;
    return m_store->ledger().recordRejection(record);
}

// Payload first (fsynced, renamed), then its record: a record on disk always
// has its payload. Only then is the submission added and acknowledged.
Status ProjectRuntime::acceptDurably(
    const std::string& key, const TaskState& task, const net::SubmitRequest& request, double norm, int64_t nowMs)
{
    // Task ids are never reused, so the stem is new; never overwrite an
    // accepted submission all the same.
    std::string stem = pendingStem(m_version + 1, task.lease.id);
    for (int k = 1; std::filesystem::exists(pendingDir() / (stem + ".json"))
         || std::filesystem::exists(pendingDir() / (stem + ".bin"));
         ++k)
        stem = pendingStem(m_version + 1, task.lease.id) + "-" + std::to_string(k);
    const auto payload = pendingDir() / (stem + ".bin");
    if (Status s = syncFile(task.uploadFile); !s)
        return s;
    std::error_code ec;
    std::filesystem::rename(task.uploadFile, payload, ec);
    if (ec)
        return Error::make("io_error", "cannot move " + task.uploadFile.string() + ": " + ec.message());
    nlohmann::json record = {{"round", m_version + 1}, {"version", m_version}, {"task", task.lease.id},
        {"range", task.lease.range}, {"key", key}, {"tokens", request.tokens}, {"compute_ms", request.computeMs},
        {"train_loss", request.trainLoss}, {"norm", norm}, {"submitted_at_ms", nowMs}};
    if (Status s = engine::writeFileAtomically(pendingDir() / (stem + ".json"), record.dump()); !s)
        return s;
    ContributionRecord contribution{
        m_version + 1, key, int64_t(request.tokens), int64_t(request.computeMs), request.trainLoss, true, "", nowMs};
    if (Status s = m_store->ledger().recordContribution(contribution); !s)
        return s;
    if (Status s = accumulateFile(payload, double(request.tokens)); !s)
        return s;
    if (Status s = m_plan->complete(task.lease.id); !s)
        return s;
    m_tasks.erase(task.lease.id);
    forgetOpenTask(task.lease.id);
    m_normGate.accept(norm);
    m_accepted.push_back({contribution, task.lease.range, norm});
    m_acceptedTokens += int64_t(request.tokens);
    return Status::success();
}

Status ProjectRuntime::accumulateFile(const std::filesystem::path& payload, double weight)
{
    if (Status s = m_aggregator->begin(m_codec, weight); !s)
        return s;
    if (Status s = forEachSlice(payload, [&](std::string_view slice) { return m_aggregator->feed(slice); }); !s)
        return s;
    return m_aggregator->commit();
}

// After a restart: the accepted submissions of the open round, in the order
// they were accepted; anything of another round is stale and removed.
Status ProjectRuntime::replayPending()
{
    std::vector<std::pair<int64_t, std::filesystem::path>> records;
    for (const auto& entry : std::filesystem::directory_iterator(pendingDir())) {
        const auto path = entry.path();
        if (path.extension() != ".json" || path.filename().string().starts_with("."))
            continue;
        auto text = engine::readWholeFile(path);
        nlohmann::json record = text ? nlohmann::json::parse(*text, nullptr, false) : nlohmann::json();
        if (record.is_discarded() || !record.contains("round") || record["round"] != m_version + 1) {
            std::filesystem::remove(path);
            std::filesystem::remove(std::filesystem::path(path).replace_extension(".bin"));
            continue;
        }
        records.emplace_back(record.value("submitted_at_ms", int64_t(0)), path);
    }
    std::sort(records.begin(), records.end());
    for (const auto& [at, path] : records) {
        const auto record = nlohmann::json::parse(*engine::readWholeFile(path));
        const auto payload = std::filesystem::path(path).replace_extension(".bin");
        const double tokens = record.at("tokens").get<double>();
        if (Status s = accumulateFile(payload, tokens); !s)
            return Error::make(s.error().code, "replaying " + payload.string() + ": " + s.error().message);
        const auto range = record.at("range").get<uint32_t>();
        (void)m_plan->completeRange(range);
        const double norm = record.at("norm").get<double>();
        m_normGate.accept(norm);
        ContributionRecord contribution{m_version + 1, record.at("key").get<std::string>(), int64_t(tokens),
            record.at("compute_ms").get<int64_t>(), record.at("train_loss").get<double>(), true, "", at};
        m_accepted.push_back({contribution, range, norm});
        m_acceptedTokens += int64_t(tokens);
    }
    return Status::success();
}

} // namespace crowdtrain::coordinator
