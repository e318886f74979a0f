// The task part of the agent's loop: get a task, train it on a thread of its
// own while this thread heartbeats, encode the pseudo-gradient, upload, submit.
#include "net/volunteer/agent_loop.h"

#include "engine/diloco/flat_params.h"
#include "net/transfer/sha256.h"
#include "net/wire/error_codes.h"

#include <condition_variable>
#include <thread>

namespace crowdtrain::volunteer {
namespace {

// What the training thread shares with the agent's thread.
struct TrainingRun {
    std::mutex mutex;
    std::condition_variable finished;
    bool done = false;
    std::optional<Result<TaskOutcome>> outcome;
    std::atomic<uint64_t> steps{0};
    std::atomic<double> lastLoss{0};
    std::atomic<double> tokensPerSecond{0};
};

// Rejections of a submission or its upload: the server will never take it.
bool dropsSubmission(const Error& error)
{
    return !isConnectionError(error) && error.code != net::errc::kNotJoined;
}

} // namespace

Status AgentLoop::obtainTask(std::optional<net::Task>& task)
{
    net::GetTaskRequest request{m_options.project, m_join.session, m_theta->version};
    auto reply = m_connection->call<net::GetTaskReply>(request, controlTimeoutMs());
    if (!reply) {
        if (reply.error().code == net::errc::kStaleVersion) {
            // The round closed: learn the new version, then sync.
            auto beat = heartbeat();
            return beat ? Status::success() : Status(beat.error());
        }
        return reply.error();
    }
    if (!reply->task)
        return waitForWork(reply->retryAfterMs);
    if (reply->task->version != m_theta->version) {
        m_serverVersion = reply->task->version;
        return Status::success();
    }
    task = std::move(reply->task);
    return Status::success();
}

Status AgentLoop::trainTask(const net::Task& task)
{
    const net::InnerSettings& inner = m_join.inner;
    const uint64_t steps = task.innerSteps > 0 ? task.innerSteps : inner.steps;
    m_shards->clear();
    auto source = RangeBatchSource::create(*m_shards, task.shards, m_model.blockSize, m_model.vocabSize,
        int64_t(inner.batchSize), steps * inner.batchSize);
    if (!source)
        return source.error();
    if (!m_trainer)
        m_trainer = std::make_unique<InnerTrainer>(m_model, inner, m_options.device, m_options.threads);
    log("task %llu: round %llu from version %llu, %llu steps on %s [%llu, %llu)",
        static_cast<unsigned long long>(task.taskId), static_cast<unsigned long long>(task.round),
        static_cast<unsigned long long>(task.version), static_cast<unsigned long long>(steps),
        task.shards.empty() ? "?" : task.shards.front().shard.c_str(),
        static_cast<unsigned long long>(task.shards.empty() ? 0 : task.shards.front().beginToken),
        static_cast<unsigned long long>(task.shards.empty() ? 0 : task.shards.front().endToken));

    TrainingRun run;
    std::atomic<bool> abort{false};
    std::atomic<bool> wrapUp{false};
    const auto started = Clock::now();
    std::thread worker([&, source = std::move(*source)]() mutable {
        auto outcome = m_trainer->run(m_theta->values, std::move(source), steps, task.version * inner.steps, abort,
            wrapUp, [&](const engine::StepReport& report) {
                run.steps.store(uint64_t(report.step));
                run.lastLoss.store(report.loss);
                run.tokensPerSecond.store(report.tokensPerSecond);
                if (m_options.betweenSteps)
                    m_options.betweenSteps(abort);
            });
        std::lock_guard lock(run.mutex);
        run.outcome = std::move(outcome);
        run.done = true;
        run.finished.notify_all();
    });

    // This thread keeps the session alive while the worker trains.
    Liveness liveness(m_liveness);
    auto nextBeat = Clock::now() + std::chrono::milliseconds(m_intervalMs);
    auto nextReconnect = Clock::now();
    auto nextProgress = Clock::now() + std::chrono::seconds(5);
    const uint64_t firstStep = uint64_t(m_trainer->innerStepsTaken());
    m_summary.round = task.round;
    m_summary.taskId = task.taskId;
    m_summary.steps = steps;
    m_summary.step = 0;
    setPhase("training");
    auto nextSummary = Clock::now();
    auto askedToWrapUp = [&](const char* how) {
        if (wrapUp.exchange(true))
            return;
        const uint64_t done = run.steps.load() >= firstStep ? run.steps.load() - firstStep : 0;
        log("round %llu is wrapping up (%s): submitting after step %llu of %llu",
            static_cast<unsigned long long>(task.round), how, static_cast<unsigned long long>(done + 1),
            static_cast<unsigned long long>(steps));
    };
    while (true) {
        if (m_events) {
            // Short polls: the events socket is the fast path for a wrap-up.
            {
                std::lock_guard lock(run.mutex);
                if (run.done)
                    break;
            }
            const ProjectEvents seen = m_events->wait(5);
            if (seen.wrapUpVersion == task.version)
                askedToWrapUp("event");
        } else {
            std::unique_lock lock(run.mutex);
            const auto wakeAt = std::min(nextBeat, Clock::now() + std::chrono::milliseconds(100));
            if (run.finished.wait_until(lock, wakeAt, [&] { return run.done; }))
                break;
        }
        if (stopping())
            abort.store(true);
        const auto now = Clock::now();
        if (now >= nextSummary) {
            nextSummary = now + std::chrono::milliseconds(200);
            m_summary.step = run.steps.load() >= firstStep ? run.steps.load() - firstStep : 0;
            m_summary.loss = run.lastLoss.load();
            m_summary.tokensPerSecond = run.tokensPerSecond.load();
            publish();
        }
        if (now >= nextProgress) {
            nextProgress = now + std::chrono::seconds(5);
            const uint64_t done = run.steps.load() >= firstStep ? run.steps.load() - firstStep : 0;
            log("task %llu: step %llu/%llu, loss %.4f, %.0f tok/s", static_cast<unsigned long long>(task.taskId),
                static_cast<unsigned long long>(done), static_cast<unsigned long long>(steps), run.lastLoss.load(),
                run.tokensPerSecond.load());
        }
        if (now < nextBeat)
            continue;
        nextBeat = now + std::chrono::milliseconds(m_intervalMs);
        if (!m_joined) {
            if (now < nextReconnect)
                continue;
            if (Status joined = joinOnce(); !joined) {
                const uint64_t delayMs = m_backoff.nextDelayMs();
                log("cannot join %s: %s; retrying in %.1f s (training goes on)", m_options.endpoint.c_str(),
                    joined.error().message.c_str(), double(delayMs) / 1e3);
                m_connection.reset();
                nextReconnect = Clock::now() + std::chrono::milliseconds(delayMs);
            }
            continue;
        }
        auto beat = heartbeat();
        if (beat) {
            liveness.answered();
            if (beat->wrapUp && beat->version == task.version)
                askedToWrapUp("heartbeat");
            if (beat->version != task.version && !abort.load()) {
                log("round %llu closed while training task %llu; dropping it",
                    static_cast<unsigned long long>(task.round), static_cast<unsigned long long>(task.taskId));
                abort.store(true);
            }
        } else if (beat.error().code == net::errc::kNotJoined) {
            m_joined = false;
        } else if (isConnectionError(beat.error()) && liveness.missed()) {
            disconnect(beat.error().message);
            nextReconnect = Clock::now() + std::chrono::milliseconds(m_backoff.nextDelayMs());
        }
    }
    worker.join();
    const double wallMs = std::chrono::duration<double, std::milli>(Clock::now() - started).count();

    Result<TaskOutcome>& outcome = *run.outcome;
    if (!outcome) {
        ++m_summary.dropped;
        if (outcome.error().code == net::errc::kCancelled)
            return stopping() ? outcome.error() : Status::success();
        if (outcome.error().code == net::errc::kNonFinite) {
            log("task %llu: %s; not submitted", static_cast<unsigned long long>(task.taskId),
                outcome.error().message.c_str());
            return Status::success();
        }
        return outcome.error();
    }
    m_summary.tokens += outcome->tokens;
    m_summary.computeMs += outcome->computeMs;

    // Delta = theta_v - theta_local, encoded with error feedback.
    const int64_t n = int64_t(m_elements);
    std::vector<float> delta = diloco::pseudoGradient(m_theta->values.data(), outcome->local.data(), n);
    if (m_options.alterPseudoGradient)
        m_options.alterPseudoGradient(delta);
    if (m_residual.size() != m_elements)
        m_residual.assign(m_elements, 0.0f);
    PendingSubmission pending;
    pending.task = task;
    pending.payload = diloco::encode(m_codec, delta.data(), n, m_residual.data());
    pending.sha256 = net::sha256Hex(pending.payload);
    pending.tokens = outcome->tokens;
    pending.computeMs = outcome->computeMs;
    pending.meanLoss = outcome->meanLoss;
    if (Status saved = saveFloats(m_folder->residualFile(), 0, m_join.manifestSha256, m_residual); !saved)
        return saved;
    log("task %llu: trained %llu steps, loss %.4f (last %.4f), %.0f tok/s, %.1f s compute of %.1f s",
        static_cast<unsigned long long>(task.taskId), static_cast<unsigned long long>(outcome->steps),
        outcome->meanLoss, outcome->lastLoss,
        outcome->computeMs > 0 ? double(outcome->tokens) / (outcome->computeMs / 1e3) : 0.0, outcome->computeMs / 1e3,
        wallMs / 1e3);
    m_pending = std::move(pending);
    if (!m_joined)
        return Error::make(net::errc::kTimeout, "not connected after training");
    return submitPending();
}

Status AgentLoop::rejectPending(const Error& why)
{
    // The round moved on or the server forgot the task (it restarted, or
    // counted us gone): not a verdict on the work, so not a rejection.
    if (why.code == net::errc::kStaleVersion || why.code == net::errc::kUnknownTask)
        return dropPending((why.code + " (" + why.message + ")").c_str());
    ++m_summary.tasks;
    ++m_summary.rejected;
    log("task %llu rejected: %s (%s)", static_cast<unsigned long long>(m_pending->task.taskId), why.code.c_str(),
        why.message.c_str());
    m_pending.reset();
    return Status::success();
}

// A submit is not repeatable (docs/protocol.md): once one went out
// unanswered, the coordinator no longer knowing the task can also mean it
// accepted it before the reply was lost, so the work is counted as
// unconfirmed rather than dropped.
Status AgentLoop::dropPending(const char* why)
{
    const auto taskId = static_cast<unsigned long long>(m_pending->task.taskId);
    if (m_pending->submitUnanswered) {
        ++m_summary.unconfirmed;
        log("task %llu unconfirmed: %s after a submit that got no answer; the coordinator may have accepted it "
            "(my_stats has its count)",
            taskId, why);
    } else {
        ++m_summary.dropped;
        log("task %llu dropped: %s", taskId, why);
    }
    m_pending.reset();
    return Status::success();
}

Status AgentLoop::submitPending()
{
    PendingSubmission& pending = *m_pending;
    if (m_serverVersion != pending.task.version)
        return dropPending(
            ("version " + std::to_string(pending.task.version) + " was closed before it could be submitted").c_str());
    setPhase("uploading");
    const uint64_t chunkBytes = m_join.chunkBytes >= 1 && m_join.chunkBytes <= net::kMaxChunkBytes
        ? m_join.chunkBytes
        : uint64_t(net::kDefaultChunkBytes);
    const uint64_t chunks = net::chunkCountFor(pending.payload.size(), chunkBytes);
    // A server may ask for an earlier chunk again (it lost an upload across
    // a reconnect); bound the walk so a confused server cannot loop us.
    for (uint64_t sent = 0; pending.nextChunk < chunks; ++sent) {
        if (stopping())
            return Error::make(net::errc::kCancelled, "stopped during the upload");
        if (sent > 2 * chunks + 2)
            return rejectPending(
                Error::make(net::errc::kUploadStalled, "the server does not take the upload's chunks"));
        const uint64_t index = pending.nextChunk;
        net::UploadChunkRequest request{m_options.project, m_join.session, pending.task.taskId, index,
            pending.payload.substr(std::size_t(index * chunkBytes), std::size_t(chunkBytes))};
        auto reply = m_connection->call<net::UploadChunkReply>(request, transferTimeoutMs());
        if (!reply)
            return dropsSubmission(reply.error()) ? rejectPending(reply.error()) : Status(reply.error());
        if (reply->nextIndex > chunks)
            return rejectPending(Error::make(net::errc::kMalformed,
                "the server expects chunk " + std::to_string(reply->nextIndex) + " of " + std::to_string(chunks)));
        pending.nextChunk = reply->nextIndex;
    }
    net::SubmitRequest submit;
    submit.project = m_options.project;
    submit.session = m_join.session;
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
    auto reply = m_connection->call<net::SubmitReply>(submit, transferTimeoutMs());
    if (!reply) {
        // No answer: the task stays valid across a re-join, so the submit
        // is sent again (its chunks are still on the server).
        if (isConnectionError(reply.error()) && reply.error().code != net::errc::kSendFailed)
            pending.submitUnanswered = true;
        return dropsSubmission(reply.error()) ? rejectPending(reply.error()) : Status(reply.error());
    }
    ++m_summary.tasks;
    ++m_summary.accepted;
    log("task %llu accepted: round %llu, %llu tokens, %llu bytes uploaded in %llu chunks",
        static_cast<unsigned long long>(pending.task.taskId), static_cast<unsigned long long>(reply->round),
        static_cast<unsigned long long>(pending.tokens), static_cast<unsigned long long>(pending.payload.size()),
        static_cast<unsigned long long>(chunks));
    m_pending.reset();
    return Status::success();
}

} // namespace crowdtrain::volunteer
