// ProjectRuntime's round close (project_runtime.h; docs/architecture.md,
// "The round close"): begun on the loop, computed on a worker thread,
// published on the loop, evaluated and checkpointed on the evaluation
// thread, reported on the loop.
#include "net/coordinator/project_runtime.h"

#include "core/clock.h"
#include "net/wire/error_codes.h"

#include <chrono>
#include <cstdio>
#include <set>

namespace crowdtrain::coordinator {
namespace {

int64_t steadyNowMs()
{
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

} // namespace

bool ProjectRuntime::closeDue() const
{
    return m_policy->roundDue() && !closing() && m_closeRetry.due(steadyNowMs());
}

bool ProjectRuntime::tickDue() const
{
    if (m_closing)
        return false;
    return m_policy->roundDue() ? m_closeRetry.due(steadyNowMs()) : m_policy->tickDue();
}

void ProjectRuntime::beginClose(int64_t nowMs)
{
    RoundState::CloseInput input
        = RoundState::closeInput(nowMs, m_sessions->online(), *m_plan, m_submissions->gateRecord());
    m_report = Report{RoundReport{}, steadyNowMs()};
    m_report->report.project = m_spec.name;
    m_submissions->closeBegins();
    m_round->setClosing(true);
    m_closing = m_worker->post([this, input = std::move(input)]() -> Result<RoundState::Closed> {
        try {
            auto closed = m_round->computeClose(input, m_options.faultPoint);
            if (!closed)
                return closed;
            // Hashed here, so that publishing it costs the loop nothing.
            if (Status s = m_downloads->prepareVersion(closed->round, closed->update); !s)
                std::fprintf(stderr, "%s: %s\n", m_spec.name.c_str(), s.error().message.c_str());
            return closed;
        } catch (const c10::Error& e) {
            return Error::make(net::errc::kInternal, e.what_without_backtrace());
        } catch (const std::exception& e) {
            return Error::make(net::errc::kInternal, e.what());
        }
    });
}

void ProjectRuntime::collectClose(bool wait, PublishedEvents& events)
{
    if (!m_closing || (!wait && m_closing->wait_for(std::chrono::seconds(0)) != std::future_status::ready))
        return;
    Result<RoundState::Closed> closed = m_closing->get();
    m_closing.reset();
    m_round->setClosing(false);
    if (!closed) {
        // Nothing changed: the round stays open, its accepted submissions
        // kept, and a later tick tries again (a full disk: once space returns).
        const int64_t now = steadyNowMs();
        if (m_closeRetry.failed(closed.error().message, now))
            std::fprintf(stderr,
                "%s: round %lld not closed: %s; the round stays open, trying again in %lld s and then "
                "less often (said again only if the error changes)\n",
                m_spec.name.c_str(), static_cast<long long>(m_round->openRound()), closed.error().message.c_str(),
                static_cast<long long>(m_closeRetry.retryDelayMs(now) / 1000));
        m_report.reset();
        m_downloads->forgetVersion(m_round->openRound());
        return;
    }
    m_round->publishClose(*closed);
    const int64_t round = closed->round;
    if (const int failures = m_closeRetry.succeeded(); failures > 0)
        std::fprintf(stderr, "%s: round %lld closed after %d failed tries\n", m_spec.name.c_str(),
            static_cast<long long>(round), failures);
    if (m_options.faultPoint) {
        try { // a point to crash at (the restart tests); a throw here changes nothing
            m_options.faultPoint("close-published", round);
        } catch (const std::exception&) { }
    }
    const RoundRecord& record = closed->commit.record;
    int64_t tokens = 0;
    std::set<std::string> volunteers;
    for (const ContributionRecord& c : closed->commit.contributions) {
        tokens += c.tokens;
        volunteers.insert(c.publicKey);
    }
    auto rejected = m_store->ledger().rejectionsInRound(round);
    net::RoundClosedEvent event{uint64_t(round), uint64_t(round), record.trainLoss, std::nullopt, uint64_t(tokens),
        uint64_t(closed->commit.contributions.size()), rejected ? uint64_t(rejected->size()) : 0, m_sessions->online()};
    m_submissions->roundClosed();
    m_tasks->promoteAhead();
    m_policy->roundClosed();
    if (Status s = m_downloads->publish(); !s)
        std::fprintf(stderr, "%s: %s\n", m_spec.name.c_str(), s.error().message.c_str());
    events.frames.insert(
        events.frames.begin(), net::encodeEvent(m_spec.name, net::VersionPublishedEvent{uint64_t(round)}));
    if (m_report) {
        RoundReport& report = m_report->report;
        report.round = round;
        report.tokens = tokens;
        report.totalTokens = m_round->totalTokens();
        report.volunteers = int64_t(volunteers.size());
        report.trainLoss = record.trainLoss;
        report.bytesWritten = closed->written.bytes;
        report.publishedMs = steadyNowMs() - m_report->startedMs;
        report.checkpoint = m_checkpoints->isDue(round);
    }
    // Its validation loss, and the checkpoint that records it, follow from
    // the evaluation thread, so volunteers never wait for them.
    m_evaluation->start(round, m_round->totalTokens(), closed->params, event, m_checkpoints->isDue(round),
        [this, stale = m_store->takeUnreferenced()](Evaluation::Done& done) {
            if (Status s = ProjectStore::removeFiles(stale); !s) // only costs disk
                std::fprintf(stderr, "%s: %s\n", m_spec.name.c_str(), s.error().message.c_str());
            exportCheckpoint(done);
        });
}

// A crash after a commit but before its evaluation ended leaves the last
// round without its validation loss or its due checkpoint: both are made
// again, on the evaluation thread, as after a close.
void ProjectRuntime::resumeEvaluation()
{
    const RoundRecord& last = *m_store->lastRound();
    const bool checkpointMissing = m_checkpoints->isDue(last.round) && !m_checkpoints->find(last.round);
    if (last.round == 0 || (last.valLoss && !checkpointMissing))
        return;
    const net::RoundClosedEvent event{uint64_t(last.round), uint64_t(last.version), last.trainLoss, std::nullopt,
        uint64_t(last.tokens), uint64_t(last.accepted), uint64_t(last.rejected), m_sessions->online()};
    m_evaluation->start(last.round, m_round->totalTokens(), m_round->sharedParams(), event, checkpointMissing,
        [this](Evaluation::Done& done) { exportCheckpoint(done); });
}

void ProjectRuntime::exportCheckpoint(Evaluation::Done& done)
{
    if (!m_checkpoints->isDue(done.round))
        return;
    auto named = parameterViews(m_spec.model, *done.params); // done.params outlives the export
    auto published = named
        ? m_checkpoints->publish(done.round, done.tokens, done.valLoss, m_spec.model, *named, core::unixNowMs(),
            done.samplesJson.empty() ? std::map<std::string, std::string>{}
                                     : std::map<std::string, std::string>{{"samples.json", done.samplesJson}})
        : Result<CheckpointInfo>(named.error());
    if (!published) {
        done.checkpointError = published.error().message;
        return;
    }
    done.bytesWritten += published->totalBytes();
    if (Status s = m_downloads->prepareCheckpoint(*published); !s)
        std::fprintf(stderr, "%s: %s\n", m_spec.name.c_str(), s.error().message.c_str());
    done.checkpoint = std::move(*published);
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
    if (m_report && m_report->report.round == done->round) {
        m_report->report.valLoss = done->valLoss;
        m_report->report.bytesWritten += done->bytesWritten;
        m_report->report.closeMs = steadyNowMs() - m_report->startedMs;
        if (m_options.roundReport)
            m_options.roundReport(m_report->report);
        m_report.reset();
    }
    if (!done->checkpointError.empty())
        std::fprintf(stderr, "%s: checkpoint of round %lld failed: %s\n", m_spec.name.c_str(),
            static_cast<long long>(done->round), done->checkpointError.c_str());
    if (!done->checkpoint)
        return;
    if (Status s = m_downloads->publish(); !s)
        std::fprintf(stderr, "%s: %s\n", m_spec.name.c_str(), s.error().message.c_str());
    net::CheckpointInfo published = m_downloads->announced(wireCheckpoint(*done->checkpoint));
    if (auto mix = m_queries->deviceMix(done->round))
        published.devices = std::move(*mix);
    events.frames.push_back(net::encodeEvent(m_spec.name, net::CheckpointPublishedEvent{std::move(published)}));
}

} // namespace crowdtrain::coordinator
