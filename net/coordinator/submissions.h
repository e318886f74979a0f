#pragma once

// Uploads and acceptance for one project's open round: the chunks of each
// task's pseudo-gradient (checked as they arrive), the checks a submit must
// pass (round, shape, chunks, tokens, SHA-256, finiteness, the gate), the
// durable acceptance (payload fsynced and renamed under pending/, its JSON
// record written atomically, its ledger row, only then the aggregate and the
// reply), rejections recorded against their sender, the answer to a submit
// sent again after its reply was lost, and the replay of pending/ after a
// restart.
//
// The checks run on the loop; the durable acceptance runs on the project's
// worker (ProjectWorker), so that no fsync and no pass over a GPT-2-sized
// payload holds the loop, and the reply follows when the loop collects it
// (collectAccepted, each tick). Meanwhile the task is `accepting`: it is not
// dropped, a second submit of it waits for the same answer, and the copy
// check counts its payload as accepted.
//
// The gate (diloco::NormGate, docs/architecture.md "The submission gate"):
// norm floor and ceiling, no element above the per-element ceiling, within
// [1/4, 4] x the trust-weighted median over keys with earned trust
// (KeyTrust: new keys never set it), a cosine with the outer momentum at
// least 1/4 of the keys' median once that says something, and no payload
// accepted before (the same SHA-256 in this round or the previous one).
// Its statistics of the closed round, the keys' trust and the accepted
// payloads' hashes go into the state file (gateRecord()), so a restart
// keeps it as strict.
//
// With the spec's trust.evaluate, a drawn share of the submissions that
// pass is also scored on the worker, before its durable half, by the loss
// change it buys on held-out windows (SubmissionScorer); one that makes the
// loss worse than honest work does is refused there (loss_out_of_bounds),
// and its key's trust is halved.
//
// Used from one thread (the server's loop), but for the durable acceptance.

#include "engine/diloco/aggregator.h"
#include "net/coordinator/key_trust.h"
#include "net/coordinator/payload_sketch.h"
#include "net/coordinator/project_worker.h"
#include "net/coordinator/round_state.h"
#include "net/coordinator/submission_scorer.h"
#include "net/coordinator/submissions_calibration.h"
#include "net/coordinator/task_board.h"
#include "net/wire/messages.h"

#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <set>

namespace crowdtrain::coordinator {

class Submissions {
public:
    // `endTask(id)`: ends a refused task (its range back to the pool).
    // `sparse`: the layout of a sparse project (outlives this), else null;
    // its messages are walked chunk by chunk as they arrive, as dense ones are.
    // `worker` runs the durable half of each acceptance.
    Submissions(const ProjectSpec& spec, diloco::Codec codec, int64_t parameters, const diloco::SparseLayout* sparse,
        ProjectStore& store, DataPlan& plan, TaskBoard& tasks, RoundState& round, ProjectWorker& worker,
        std::function<void(uint64_t)> endTask);

    // Creates pending/, restores the gate from the state file's bytes and
    // the round's direction from the outer momentum.
    Status open(const std::string& gateRecord);
    // After a restart: the accepted submissions of the open round, in the
    // order they were accepted; anything of another round is removed.
    Status replayPending();
    // Re-reads the whole chunks of a task's upload after a restart.
    Status resumeUpload(OpenTask& task);

    Result<net::UploadChunkReply> uploadChunk(
        const std::string& key, const net::UploadChunkRequest& request, int64_t nowMs);
    // The verdict on a submit, on the loop: at once (a refusal, or the
    // answer to a repeat), or once its acceptance is durable (collectAccepted).
    using SubmitDone = std::function<void(Result<net::SubmitReply>)>;
    void submit(const std::string& key, const net::SubmitRequest& request, int64_t nowMs, SubmitDone done);
    // The acceptances the worker finished, in order (all of them when
    // `wait`): each counts toward the round and its submitter hears.
    void collectAccepted(bool wait);
    // Whether an acceptance is on the worker (a close waits for none).
    bool accepting() const { return !m_accepting.empty(); }
    // A close is about to change the momentum in place: the uploads in
    // progress stop reading it (their direction check is then skipped; they
    // are of the round being closed).
    void closeBegins();
    // Points to crash at on the worker (the restart tests): "accept-begun",
    // "accept-durable" (then the reply is not sent yet).
    void setFaultPoint(RoundState::FaultPoint fault) { m_fault = std::move(fault); }

    // The gate's statistics of the round being closed (for the state file).
    std::string gateRecord() const;
    // The round closed and was committed: pending/ is emptied, the keys'
    // trust, the gate and the direction move on.
    void roundClosed();

    const KeyTrust& trust() const { return m_trust; }
    // Norms above the reference are scaled down to kClipFactor x it in the
    // int8 average (the gate refuses them above 4 x).
    static constexpr double kClipFactor = 2.0;
    // No element of a payload may exceed this share of the reference norm.
    static constexpr double kMaxElementShare = 0.25;
    // After this many refusals of established keys on the reference in a row
    // (nothing accepted between them), the gate forgets its statistics:
    // they came from keys that are gone (docs/architecture.md).
    static constexpr int kStaleReferenceRejections = 3;
    // Who the host's calibration samples are in the gate (no Z85 key is).
    static constexpr const char* kHostKey = "host calibration";
    // The host's measure counts in the gate's statistics while it is of one
    // of the last kHostMeasureAge versions: honest norms drift (8.7 -> 2 over
    // 40 rounds of the attack bench), and a host slower than the rounds must
    // not judge them by an old one; the established keys' samples then do.
    static constexpr int64_t kHostMeasureAge = 3;
    // A scored submission is refused when applied alone it changes the
    // held-out loss by more than lossBound(): F = this share of theta_v's
    // loss with no honest score to compare with, else
    // max(F, r + max(|r|, F)), r = the median change of the established
    // keys' scored submissions that passed (this round and the previous
    // one).
    static constexpr double kLossRiseShare = 0.01;
    // The largest change of the held-out loss `loss` a scored submission
    // may make, given the honest median change r: never under the noise
    // floor F (the drawn windows score an honest update as slightly
    // harmful now and then, whatever r; with r + max(|r|, F) alone the
    // bound was 0 once r < -F, and refused such updates), and above it
    // only as far as honest updates raise the loss themselves.
    static double lossBound(std::optional<double> honest, double loss);

private:
    Error aheadTooEarly(const OpenTask& task) const;
    Status reject(const std::string& key, const OpenTask& task, const net::SubmitRequest& request, const Error& why,
        int64_t nowMs);
    Result<net::SubmitReply> resubmission(const std::string& key, const net::SubmitRequest& request);
    Result<diloco::PayloadStats> inspectUpload(const OpenTask& task, PayloadSketch& sketch) const;
    int64_t creditedComputeMs(const OpenTask& task, const net::SubmitRequest& request, int64_t nowMs) const;
    Result<net::SubmitReply> check(
        const std::string& key, const net::SubmitRequest& request, int64_t nowMs, SubmitDone& done);
    void accept(const std::string& key, OpenTask& task, const net::SubmitRequest& request, GateStats gate,
        PayloadSketch sketch, int64_t nowMs, SubmitDone done);
    struct Durable; // what the worker writes
    // `evaluated`: it was scored and passed; its record says so, so that a
    // restart credits it as evaluated work (KeyTrust::Contribution::credit).
    Status makeDurable(const Durable& durable, bool evaluated);
    // What the worker's job of an acceptance gives back: its score, when it
    // was scored; the refusal, when the score refused it (nothing was
    // written); else whether it is durable.
    struct Verdict {
        Status durable = Status::success();
        std::optional<SubmissionScorer::Score> score;
        std::optional<Error> refused;
    };
    Verdict acceptOnWorker(const Durable& durable, std::optional<double> honestChange);
    std::optional<double> honestChange() const; // r above, if any
    void refusedOnScore(const AcceptedSubmission& a, const Error& why);
    PayloadSketch sketchOf(const std::filesystem::path& payload) const;
    std::optional<Error> checkElements(const diloco::PayloadStats& stats, double scale) const;
    std::optional<Error> checkCopy(const std::string& sha, const PayloadSketch& sketch) const;
    // What the gate measured of an accepted submission, and its trust class.
    void accepted(const AcceptedSubmission& a, PayloadSketch sketch);
    double clipOf(double gateNorm) const;
    std::optional<double> sparseNorm() const; // RoundState::setSparseNorm
    void takeDirection(); // the round's reference direction from the outer momentum
    void logClosedRound() const;
    // The open round's accepted submissions as KeyTrust sees them.
    std::vector<KeyTrust::Contribution> roundContributions() const;
    // spec trust.calibrate: the host's measure of its own task (HostCalibration)
    // as a named key's sample in the gate's statistics.
    void takeCalibration(bool wait);
    void addHostSample(diloco::NormGate::State& state) const;
    void restoreGate(std::vector<diloco::NormGate::Sample> previous);
    // Not while the round is closing: the close changes the momentum in place.
    const float* direction() const { return m_directionNorm > 0 && !m_round.closing() ? m_direction : nullptr; }
    std::filesystem::path pendingDir() const;

    const ProjectSpec& m_spec;
    diloco::Codec m_codec;
    int64_t m_parameters;
    const diloco::SparseLayout* m_sparse;
    uint64_t m_payloadBytes;
    ProjectStore& m_store;
    DataPlan& m_plan;
    TaskBoard& m_tasks;
    RoundState& m_round;
    std::function<void(uint64_t)> m_endTask;
    diloco::NormGate m_gate;
    KeyTrust m_trust;
    double m_elementCeiling = 0; // no honest element moves further (0: unchecked)
    static constexpr int kStaleDirectionRejections = 8;
    int m_directionRejections = 0; // in the open round, while nothing is accepted
    int m_referenceRejections = 0; // of established keys, since the last acceptance
    std::vector<AcceptedSubmission> m_roundAccepted; // the open round's, as the gate saw them
    std::set<std::string> m_previousShas; // the payloads accepted in the previous round
    std::vector<int64_t> m_sketchPositions; // dense codecs: drawn at each start
    std::vector<PayloadSketch> m_roundSketches; // of m_roundAccepted
    std::vector<PayloadSketch> m_previousSketches; // of the previous round's (since this start)
    std::map<std::string, int> m_refusals; // the open round's, by code (for the log)
    bool m_defences = true; // spec trust.defences (benchmarks turn them off)
    std::unique_ptr<HostCalibration> m_calibration; // spec trust.calibrate
    std::unique_ptr<SubmissionScorer> m_scorer; // spec trust.evaluate (rate > 0)
    std::vector<double> m_roundChanges, m_previousChanges; // established keys' passed scores
    int m_roundScored = 0, m_roundScoreRefusals = 0;
    double m_roundScoreMs = 0; // the round's scoring time, all scores
    std::optional<HostCalibration::Measure> m_hostMeasure; // its latest
    mutable int64_t m_hostMeasureAgedOut = -1; // the version of the last measure logged as too old
    // The outer momentum itself (not a copy: 6 GB at GPT-2 1.5B), as the
    // round opened; norm 0 before the first outer step.
    const float* m_direction = nullptr;
    double m_directionNorm = 0;
    ProjectWorker& m_worker;
    // Acceptances on the worker, in the order posted (= finished).
    struct Accepting {
        AcceptedSubmission accepted;
        PayloadSketch sketch;
        std::vector<SubmitDone> waiting; // the submit, and any repeat of it meanwhile
        std::future<Verdict> durable;
    };
    std::deque<Accepting> m_accepting;
    RoundState::FaultPoint m_fault;
};

} // namespace crowdtrain::coordinator
