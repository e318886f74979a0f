#include "net/coordinator/round_state.h"

#include "core/file_io.h"
#include "engine/error_codes.h"
#include "net/wire/error_codes.h"

#include <cstdio>

namespace crowdtrain::coordinator {

RoundState::RoundState(
    const ProjectSpec& spec, ProjectStore& store, int64_t parameters, std::optional<diloco::SparseLayout> sparse)
    : m_spec(spec)
    , m_store(store)
    , m_parameters(parameters)
    , m_outer(std::make_unique<diloco::OuterNesterov>(sparse && spec.outer.momentum == 0.0 ? 0 : parameters,
          diloco::OuterOptions{spec.outer.lr, spec.outer.momentum, spec.outer.nesterov}))
    , m_aggregator(sparse ? 0 : parameters)
    , m_freshAggregator(sparse ? 0 : parameters)
{
    if (sparse) {
        m_freshSparse.emplace(*sparse);
        m_sparse.emplace(std::move(*sparse));
    }
}

Status RoundState::createVersionZero(std::vector<float> params, std::optional<double> valLoss, int64_t nowMs)
{
    m_params = std::make_shared<std::vector<float>>(std::move(params));
    m_residual.assign(std::size_t(m_parameters), 0.0f);
    m_version = 0;
    m_lastValLoss = valLoss;
    auto written = m_store.writeVersion(GlobalStateView{0, *m_params, {}, {}, {}}, {});
    if (!written)
        return written.error();
    m_paramsSha = written->paramsSha256;
    RoundCommit commit;
    commit.record.round = 0;
    commit.record.valLoss = valLoss;
    commit.record.closedAtMs = nowMs;
    return m_store.commitWritten(std::move(commit), 0, false);
}

Result<std::string> RoundState::load()
{
    auto state = m_store.loadLatest();
    if (!state)
        return state.error();
    m_version = state->version;
    m_params = std::make_shared<std::vector<float>>(std::move(state->params));
    m_paramsSha = std::move(state->paramsSha256);
    m_residual = state->updateResidual.size() == std::size_t(m_parameters)
        ? std::move(state->updateResidual)
        : std::vector<float>(std::size_t(m_parameters), 0.0f);
    if (m_outer->size() > 0 && !state->momentum.empty())
        if (Status s = m_outer->setMomentum(std::move(state->momentum)); !s)
            return s.error();
    m_lastValLoss = m_store.lastRound()->valLoss;
    m_totalTokens = m_store.lastRound()->totalTokens;
    return std::move(state->extra);
}

int64_t RoundState::target() const
{
    // A task trains on H * batch * block tokens (its range holds one more,
    // the last target), so "one task's worth" (token_target 0) is that many:
    // a submission of a whole task closes the round.
    return m_spec.round.tokenTarget > 0 ? int64_t(m_spec.round.tokenTarget) : int64_t(m_spec.tokensPerTask() - 1);
}

Status RoundState::add(AcceptedSubmission accepted, const std::filesystem::path& payload, diloco::Codec codec)
{
    accepted.payload = payload;
    if (Status s = sum(accepted, payload, codec); !s)
        return s;
    noteAccepted(std::move(accepted));
    return Status::success();
}

Status RoundState::sum(const AcceptedSubmission& accepted, const std::filesystem::path& payload, diloco::Codec codec)
{
    if (m_closing)
        return Error::make(net::errc::kUnavailable, "the round is closing");
    if (codec != m_spec.codec)
        return Error::make(net::errc::kBadShape, "a payload of another codec than the project's");
    if (accepted.payload != payload)
        return Error::make(net::errc::kInternal, "the accepted submission names another payload file");
    return sumAgain(accepted);
}

// Into the established keys' aggregate or the new keys'.
Status RoundState::sumAgain(const AcceptedSubmission& accepted)
{
    if (m_sparse) { // a few MB at most: read whole; scaled to one norm at the close, not clipped
        auto bytes = core::readFile(accepted.payload);
        if (!bytes)
            return bytes.error();
        diloco::SparseAggregator& sum = accepted.fresh ? *m_freshSparse : *m_sparse;
        return sum.add(*bytes, double(accepted.record.tokens));
    }
    diloco::RoundAggregator& sum = accepted.fresh ? m_freshAggregator : m_aggregator;
    if (Status s = sum.begin(m_spec.codec, double(accepted.record.tokens) * accepted.clip); !s)
        return s;
    if (Status s = core::forEachSlice(accepted.payload, [&](std::string_view slice) { return sum.feed(slice); }); !s)
        return s;
    return sum.commit();
}

void RoundState::noteAccepted(AcceptedSubmission accepted)
{
    m_acceptedTokens += accepted.record.tokens;
    m_accepted.push_back(std::move(accepted));
}

Result<Ledger*> RoundState::workerLedger()
{
    if (!m_workerLedger) {
        auto ledger = Ledger::open(m_store.ledger().file());
        if (!ledger)
            return ledger.error();
        m_workerLedger.emplace(std::move(*ledger));
    }
    return &*m_workerLedger;
}

RoundState::CloseInput RoundState::closeInput(
    int64_t nowMs, uint64_t volunteersOnline, const DataPlan& plan, std::string serviceBytes)
{
    return CloseInput{nowMs, volunteersOnline,
        RoundCommit::DataProgress{
            int64_t(plan.epoch()), int64_t(plan.completedCount()), int64_t(plan.rangeCount()), plan.serialize()},
        std::move(serviceBytes)};
}

// The outer step and the files of the next version: `closed` is what was
// written. Works in place: the aggregate's sum becomes the average, then
// the outer step's u; the momentum and the residual move on (restore()
// puts all of it back on a failure).
Status RoundState::writeNext(Closed& closed, const CloseInput& input)
{
    // Delta = theta_v - theta_local plays the gradient: theta_{v+1} = theta_v + u,
    // with u quantised (error feedback on our side, or on the volunteers'
    // for sparse) so that volunteers who apply the same bytes get the same
    // weights, bit for bit.
    if (m_sparse) {
        if (Status s = sparseUpdate(closed.update); !s)
            return s;
    } else {
        auto average = this->average();
        if (!average)
            return average.error();
        float* u = average->data();
        m_outer->step(u, u);
        closed.update = diloco::encode(diloco::Codec::Int8, u, m_parameters, m_residual.data());
    }
    // theta_{v+1} over theta_v when nobody else reads it (the close begins
    // only once the evaluation is done; the host calibration may still read
    // it): 4 bytes a parameter fewer at the close's peak.
    closed.thetaInPlace = m_params.use_count() == 1 && !m_spec.trust.calibrate;
    auto next = closed.thetaInPlace ? m_params : std::make_shared<std::vector<float>>(*m_params);
    closed.params = next; // from here a failure must put theta back (restore)
    if (Status s = m_sparse ? diloco::applySparseUpdate(m_sparse->layout(), closed.update, next->data())
                            : diloco::applyUpdate(diloco::Codec::Int8, closed.update, m_parameters, next->data());
        !s)
        return s;
    double lossSum = 0;
    for (const AcceptedSubmission& a : m_accepted)
        lossSum += a.record.trainLoss * double(a.record.tokens);
    RoundCommit& commit = closed.commit;
    commit.record.round = closed.round = m_version + 1;
    commit.record.trainLoss = lossSum / double(m_acceptedTokens);
    commit.record.volunteersOnline = int64_t(input.volunteersOnline);
    commit.record.closedAtMs = input.nowMs;
    for (const AcceptedSubmission& a : m_accepted)
        commit.contributions.push_back(a.record);
    commit.dataProgress = input.progress;
    auto written = m_store.writeVersion(
        GlobalStateView{m_version + 1, *next, m_outer->momentum(), m_residual, input.serviceBytes}, closed.update);
    if (!written)
        return written.error();
    closed.written = std::move(*written);
    return Status::success();
}

// u = the outer step on the median-scaled average (plain SGD, or Nesterov
// when the project asks for momentum), added to the residual; then the
// residual on u's support (the union), or its top down_k of each chunk.
// What the update leaves out (rounding, or what top-k passes over) stays
// in the residual for later rounds.
Status RoundState::sparseUpdate(std::string& update)
{
    auto average = sparseAverage();
    if (!average)
        return average.error();
    float* u = average->data();
    if (m_outer->size() > 0) {
        m_outer->step(u, u);
    } else {
        const float minusLr = float(-m_spec.outer.lr);
        for (float& v : *average)
            v = minusLr * v;
    }
    update = diloco::encodeSparseRoundUpdate(m_sparse->layout(), u, int64_t(m_spec.sparseDownK), m_residual.data());
    return Status::success();
}

namespace {

// a x avg_e + b x avg_n, over the established keys' sum (both sums are
// averaged in place and spent).
template <typename Aggregator>
Result<std::span<float>> mixInPlace(Aggregator& established, Aggregator& fresh, double a, double b)
{
    auto avg = established.averageInPlace();
    if (!avg)
        return avg.error();
    auto other = fresh.averageInPlace();
    if (!other)
        return other.error();
    for (std::size_t i = 0; i < avg->size(); ++i)
        (*avg)[i] = float(a * double((*avg)[i]) + b * double((*other)[i]));
    return avg;
}

} // namespace

// The established keys' average and the new keys', the latter weighing
// at most its capped part: (W_e avg_e + lambda W_n avg_n) / (W_e + lambda W_n).
// In place: over the established keys' sum (the new keys' alone when
// there are none).
Result<std::span<float>> RoundState::average()
{
    if (m_freshAggregator.submissions() == 0)
        return m_aggregator.averageInPlace();
    if (m_aggregator.submissions() == 0)
        return m_freshAggregator.averageInPlace();
    const double we = m_aggregator.totalWeight(), wn = m_freshAggregator.totalWeight();
    const double lambda = m_freshScale ? m_freshScale(we, wn) : 1.0;
    const double total = we + lambda * wn;
    const double a = we / total, b = lambda * wn / total;
    return mixInPlace(m_aggregator, m_freshAggregator, a, b);
}

// Each message scaled to one norm M (of the established keys' messages,
// m_sparseNorm, else the new keys' median): each aggregator's average is
// M_own x S / W, so S = avg W / M_own, and the round's average is
// M (S_e + lambda S_n) / (W_e + lambda W_n). In place, as average().
Result<std::span<float>> RoundState::sparseAverage()
{
    diloco::SparseAggregator& e = *m_sparse;
    diloco::SparseAggregator& n = *m_freshSparse;
    if (e.submissions() == 0)
        return n.averageInPlace();
    const double median = e.medianNorm();
    std::optional<double> chosen = m_sparseNorm ? m_sparseNorm() : std::nullopt;
    const double norm = chosen && *chosen > 0 ? *chosen : median;
    if (norm != median)
        std::fprintf(stderr,
            "%s: round %lld: sparse messages scaled to norm %.4g (the trust-weighted median over keys; the "
            "messages' plain median %.4g)\n",
            m_spec.name.c_str(), static_cast<long long>(openRound()), norm, median);
    if (n.submissions() == 0)
        return e.averageInPlace(norm);
    const double we = e.totalWeight(), wn = n.totalWeight();
    const double lambda = m_freshScale ? m_freshScale(we, wn) : 1.0;
    const double total = we + lambda * wn;
    // avg_e carries M_e / W_e: (W_e avg_e M / M_e + lambda W_n avg_n M / M_n) / total.
    // (a as before when M is the median: the close stays bit for bit the same.)
    const double a = norm == median ? we / total : we / total * norm / median;
    const double b = lambda * wn / total * norm / n.medianNorm();
    return mixInPlace(e, n, a, b);
}

Result<RoundState::Closed> RoundState::computeClose(const CloseInput& input, const FaultPoint& fault)
{
    if (m_broken)
        return *m_broken;
    if (fault)
        fault("close-begun", openRound());
    const int64_t submissions = m_sparse ? m_sparse->submissions() + m_freshSparse->submissions()
                                         : m_aggregator.submissions() + m_freshAggregator.submissions();
    if (submissions == 0)
        return Error::make(engine::errc::kEmpty, "no submissions to average");
    Closed closed;
    try {
        if (Status s = writeNext(closed, input); !s) {
            (void)restore(closed);
            return s.error();
        }
        if (fault)
            fault("close-written", closed.round);
        if (Status s = commit(closed); !s) {
            (void)restore(closed);
            return s.error();
        }
    } catch (...) {
        (void)restore(closed);
        throw;
    }
    // Committed: the aggregate is spent. Zeroed here rather than on the loop
    // (GBs to fill at GPT-2 1.5B); nothing reads it until add() is allowed again.
    m_aggregator.reset();
    m_freshAggregator.reset();
    if (m_sparse) {
        m_sparse->reset();
        m_freshSparse->reset();
    }
    if (fault) {
        try { // a point to crash at (the restart tests); a throw here changes nothing
            fault("close-committed", closed.round);
        } catch (const std::exception&) { }
    }
    return closed;
}

// After a failed close: the files it wrote removed, the momentum and the
// residual read back from the last committed state, the aggregate summed
// again from the accepted payloads in pending/. Should that fail, no close
// runs again until a restart (which does the same from disk).
Status RoundState::restore(Closed& closed)
{
    if (closed.round == m_version + 1) // (partly) written, never committed
        m_store.removeUncommitted(closed.round);
    closed.params.reset();
    Status restored = [&]() -> Status {
        m_residual = std::vector<float>(); // freed before the saved ones are read
        auto saved = closed.thetaInPlace ? m_store.loadLatest() : m_store.loadLatestOptimizer();
        if (!saved)
            return saved.error();
        if (closed.thetaInPlace) { // into the same buffer: the evaluation's model has views over it
            if (saved->params.size() != m_params->size())
                return Error::make(net::errc::kStateCorrupt, "the last state's theta has another size");
            std::copy(saved->params.begin(), saved->params.end(), m_params->begin());
            saved->params = std::vector<float>();
        }
        m_residual = saved->updateResidual.size() == std::size_t(m_parameters)
            ? std::move(saved->updateResidual)
            : std::vector<float>(std::size_t(m_parameters), 0.0f);
        if (m_outer->size() > 0) // in place: the gate's direction points at it
            if (Status s = m_outer->loadMomentum(saved->momentum); !s)
                return s;
        m_aggregator.reset();
        m_freshAggregator.reset();
        if (m_sparse) {
            m_sparse->reset();
            m_freshSparse->reset();
        }
        for (const AcceptedSubmission& a : m_accepted)
            if (Status s = sumAgain(a); !s)
                return s;
        return Status::success();
    }();
    if (!restored) {
        m_broken = Error::make(net::errc::kInternal,
            "a failed close could not put the round back (" + restored.error().message
                + "): restart the coordinator, which rebuilds it from disk");
        std::fprintf(stderr, "%s: %s\n", m_spec.name.c_str(), m_broken->message.c_str());
    }
    return restored;
}

Status RoundState::commit(Closed& closed)
{
    auto ledger = workerLedger();
    if (!ledger)
        return ledger.error();
    auto committed = m_store.commitRecord(**ledger, closed.commit, closed.round, !closed.update.empty());
    if (!committed)
        return committed.error();
    closed.committed = std::move(*committed);
    return Status::success();
}

void RoundState::publishClose(Closed& closed)
{
    m_store.noteCommitted(closed.committed);
    // Committed: the new version is the truth from here on.
    m_version = closed.round;
    if (!closed.thetaInPlace) // made by writeNext as a mutable vector
        m_params = std::const_pointer_cast<std::vector<float>>(closed.params);
    m_paramsSha = closed.written.paramsSha256;
    m_totalTokens += m_acceptedTokens;
    m_accepted.clear();
    m_acceptedTokens = 0;
}

Result<RoundState::Closed> RoundState::close(
    int64_t nowMs, uint64_t volunteersOnline, const DataPlan& plan, std::string serviceBytes)
{
    auto closed = computeClose(closeInput(nowMs, volunteersOnline, plan, std::move(serviceBytes)));
    if (!closed)
        return closed.error();
    publishClose(*closed);
    return closed;
}

} // namespace crowdtrain::coordinator
