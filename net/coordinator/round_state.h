#pragma once

// The global model of one project and its open round: theta_v and its
// SHA-256, the outer Nesterov optimizer and the server's error-feedback
// residual, the streaming token-weighted sum of the round's accepted
// pseudo-gradients, and the list of those accepted. close() makes the next
// version: average, outer step, int8 quantisation with error feedback,
// theta_{v+1} = theta_v + decode(u), and one atomic commit. With the
// sparse codec the round is a diloco::SparseAggregator instead (median-norm
// scaling; outer SGD, with momentum if the project asks; a sparse update:
// the residual on the messages' union, or its top down_k of each chunk):
// (ProjectStore::commit). New keys' submissions are summed apart and
// enter the average with their part capped (KeyTrust::freshScale); a
// sparse round scales all its messages to the median norm of the
// established keys' messages when it has any. Until that commit nothing here changes: a
// failure, an error or an exception, leaves the round open as it was.
//
// A close runs in two steps so that the server's loop never waits on it:
// computeClose() (aggregate, outer step, the files of the next version
// written and hashed, the ledger's commit through a second connection of
// its own) on the project's worker thread, then publishClose() on the loop
// (the switch to the new version). Between the two the round is closing():
// the worker alone touches the aggregate, the outer momentum and the
// residual; the loop reads the version, theta and the accepted list, which
// do not change, and sum() is refused.
//
// Used from the server's loop, but for computeClose() and sum(), which run
// on the project's worker (ProjectWorker), one at a time; params are shared
// (sharedParams) with the evaluation thread, never copied.

#include "engine/diloco/aggregator.h"
#include "engine/diloco/outer_optimizer.h"
#include "engine/diloco/sparse_aggregator.h"
#include "net/coordinator/data_plan.h"
#include "net/coordinator/project_spec.h"
#include "net/coordinator/state_store.h"

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>

namespace crowdtrain::coordinator {

// What the submission gate measured of an accepted submission.
struct GateStats {
    double norm = 0; // scaled to a whole task
    std::optional<double> cosine; // with the round's reference direction
};

struct AcceptedSubmission {
    ContributionRecord record;
    uint32_t range = 0;
    GateStats gate;
    // Its key had no earned trust when it was accepted: the new keys' part
    // of the round is capped (KeyTrust::freshScale).
    bool fresh = false;
    // Its weight is tokens x clip (int8: a norm above the clipping bound is
    // scaled down to it).
    double clip = 1.0;
    std::filesystem::path payload; // under pending/ (a failed close sums it again)
    // Scored on held-out loss and passed (trust.evaluate): with evaluation,
    // only such work earns its key trust (KeyTrust::Contribution::credit).
    bool evaluated = false;
};

class RoundState {
public:
    // sparse: the layout, for a project whose codec is sparse.
    RoundState(const ProjectSpec& spec, ProjectStore& store, int64_t parameters,
        std::optional<diloco::SparseLayout> sparse = std::nullopt);

    // First start: theta_0 is committed as round 0.
    Status createVersionZero(std::vector<float> params, std::optional<double> valLoss, int64_t nowMs);
    // Later starts: the last committed version; returns its service bytes.
    Result<std::string> load();

    int64_t version() const { return m_version; }
    int64_t openRound() const { return m_version + 1; }
    const std::vector<float>& params() const { return *m_params; }
    std::shared_ptr<const std::vector<float>> sharedParams() const { return m_params; }
    const std::string& paramsSha() const { return m_paramsSha; }
    const std::vector<float>& momentum() const { return m_outer->momentum(); }
    int64_t totalTokens() const { return m_totalTokens; }
    std::optional<double> lastValLoss() const { return m_lastValLoss; }
    void setLastValLoss(std::optional<double> loss) { m_lastValLoss = loss; }

    // Tokens the round needs: round.token_target, or one task's H * B * T.
    int64_t target() const;
    // Adds an accepted submission whose payload is in `payload`: sum(),
    // then noteAccepted() (the replay after a restart).
    Status add(AcceptedSubmission accepted, const std::filesystem::path& payload, diloco::Codec codec);
    // The payload into the round's aggregate (on the project's worker, as
    // the close: ProjectWorker). Refused while closing().
    Status sum(const AcceptedSubmission& accepted, const std::filesystem::path& payload, diloco::Codec codec);
    // It counts toward the round (on the loop, once sum() succeeded).
    void noteAccepted(AcceptedSubmission accepted);
    // The second connection to the ledger, for the worker's writes (opened
    // at its first use; the loop keeps the store's own).
    Result<Ledger*> workerLedger();
    const std::vector<AcceptedSubmission>& accepted() const { return m_accepted; }
    // The new keys' factor in the average: a function of (established
    // weight, new weight), KeyTrust::freshScale.
    void setFreshScale(std::function<double(double, double)> scale) { m_freshScale = std::move(scale); }
    // A sparse round's norm M, which the established keys' messages are
    // scaled to (Submissions: the trust-weighted median over keys, so that
    // keys with little trust and many messages cannot set it); none: their
    // plain median. Called on the worker during a close.
    void setSparseNorm(std::function<std::optional<double>()> norm) { m_sparseNorm = std::move(norm); }

    int64_t acceptedTokens() const { return m_acceptedTokens; }

    // What a close records, taken on the loop when it begins.
    struct CloseInput {
        int64_t nowMs = 0;
        uint64_t volunteersOnline = 0;
        RoundCommit::DataProgress progress;
        std::string serviceBytes; // kept verbatim in the state file (the gate's record)
    };
    static CloseInput closeInput(
        int64_t nowMs, uint64_t volunteersOnline, const DataPlan& plan, std::string serviceBytes);

    struct Closed {
        int64_t round = 0;
        RoundCommit commit; // as written
        std::string update; // the encoded update that made the new version
        std::shared_ptr<const std::vector<float>> params; // theta of the new version
        WrittenState written;
        RoundRecord committed; // as the ledger has it
        // theta_{v+1} was made over theta_v's own buffer (nobody else held
        // it): a failure reads theta_v back from its file.
        bool thetaInPlace = false;
    };
    using FaultPoint = std::function<void(std::string_view, int64_t)>;
    // The round's close up to the files of the next version and their
    // commit in the ledger (on a worker thread, while closing()). It works
    // in place: the average and the outer step over the aggregate's sum,
    // the momentum and the residual updated where they are (no copies: at
    // GPT-2 1.5B each is 6 GB). On an error or an exception it puts the
    // round back as it was: the momentum and residual read again from the
    // last committed state, the aggregate summed again from pending/, the
    // orphan files removed (open() removes any a crash left). Committed,
    // the new version is the truth: a crash before publishClose() restarts
    // from it.
    Result<Closed> computeClose(const CloseInput& input, const FaultPoint& fault = {});
    // The switch to the version computeClose() committed (on the loop).
    void publishClose(Closed& closed);
    // Both at once (tests and benches).
    Result<Closed> close(int64_t nowMs, uint64_t volunteersOnline, const DataPlan& plan, std::string serviceBytes);

    bool closing() const { return m_closing; }
    void setClosing(bool closing) { m_closing = closing; }

private:
    Status sparseUpdate(std::string& update);
    Result<std::span<float>> average();
    Result<std::span<float>> sparseAverage();
    Status writeNext(Closed& closed, const CloseInput& input);
    Status sumAgain(const AcceptedSubmission& accepted);
    Status restore(Closed& closed);
    Status commit(Closed& closed);

    const ProjectSpec& m_spec;
    ProjectStore& m_store;
    int64_t m_parameters;
    int64_t m_version = 0;
    // theta_v; the close writes theta_{v+1} over it when it holds the only
    // reference (no evaluation or host calibration reads it then).
    std::shared_ptr<std::vector<float>> m_params;
    std::string m_paramsSha;
    std::unique_ptr<diloco::OuterNesterov> m_outer;
    std::vector<float> m_residual;
    std::optional<double> m_lastValLoss;
    int64_t m_totalTokens = 0;
    diloco::RoundAggregator m_aggregator;
    diloco::RoundAggregator m_freshAggregator; // the new keys'
    std::optional<diloco::SparseAggregator> m_sparse;
    std::optional<diloco::SparseAggregator> m_freshSparse;
    std::function<double(double, double)> m_freshScale;
    std::function<std::optional<double>()> m_sparseNorm;
    std::vector<AcceptedSubmission> m_accepted;
    int64_t m_acceptedTokens = 0;
    bool m_closing = false;
    // A failed close could not read the optimizer back: no close until a restart.
    std::optional<Error> m_broken;
    std::optional<Ledger> m_workerLedger; // the worker's connection, opened at its first use
};

} // namespace crowdtrain::coordinator
