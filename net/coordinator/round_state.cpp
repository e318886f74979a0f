#include "net/coordinator/round_state.h"

#include "core/file_io.h"
#include "engine/error_codes.h"
#include "net/wire/error_codes.h"

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
    m_params = std::make_shared<const std::vector<float>>(std::move(params));
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
    m_params = std::make_shared<const std::vector<float>>(std::move(state->params));
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
    if (Status s = sum(accepted, payload, codec); !s)
        return s;
    noteAccepted(std::move(accepted));
    return Status::success();
}

Status RoundState::sum(const AcceptedSubmission& accepted, const std::filesystem::path& payload, diloco::Codec codec)
{
    if (m_closing)
        return Error::make(net::errc::kUnavailable, "the round is closing");
    if (m_sparse) { // a few MB at most: read whole; scaled to one norm at the close, not clipped
        auto bytes = core::readFile(payload);
        if (!bytes)
            return bytes.error();
        diloco::SparseAggregator& sum = accepted.fresh ? *m_freshSparse : *m_sparse;
        return sum.add(*bytes, double(accepted.record.tokens));
    }
    diloco::RoundAggregator& sum = accepted.fresh ? m_freshAggregator : m_aggregator;
    if (Status s = sum.begin(codec, double(accepted.record.tokens) * accepted.clip); !s)
        return s;
    if (Status s = core::forEachSlice(payload, [&](std::string_view slice) { return sum.feed(slice); }); !s)
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
// written. Changes momentum and residual even when it fails (restore()
// puts them back).
Status RoundState::writeNext(const std::vector<float>& average, Closed& closed, const CloseInput& input)
{
    // Delta = theta_v - theta_local plays the gradient: theta_{v+1} = theta_v + u,
    // with u quantised (error feedback on our side, or on the volunteers'
    // for sparse) so that volunteers who apply the same bytes get the same
    // weights, bit for bit.
    auto next = std::make_shared<std::vector<float>>(*m_params);
    if (m_sparse) {
        if (Status s = sparseUpdate(closed.update); !s)
            return s;
        if (Status s = diloco::applySparseUpdate(m_sparse->layout(), closed.update, next->data()); !s)
            return s;
    } else {
        std::vector<float> update = m_outer->step(average.data());
        closed.update = diloco::encode(diloco::Codec::Int8, update.data(), m_parameters, m_residual.data());
        if (Status s = diloco::applyUpdate(diloco::Codec::Int8, closed.update, m_parameters, next->data()); !s)
            return s;
    }
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
    closed.params = std::move(next);
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
    std::vector<float> u;
    if (m_outer->size() > 0) {
        u = m_outer->step(average->data());
    } else {
        u = std::move(*average);
        const float minusLr = float(-m_spec.outer.lr);
        for (float& v : u)
            v = minusLr * v;
    }
    update
        = diloco::encodeSparseRoundUpdate(m_sparse->layout(), u.data(), int64_t(m_spec.sparseDownK), m_residual.data());
    return Status::success();
}

// The established keys' average and the new keys', the latter weighing
// at most its capped part: (W_e avg_e + lambda W_n avg_n) / (W_e + lambda W_n).
Result<std::vector<float>> RoundState::average() const
{
    if (m_freshAggregator.submissions() == 0)
        return m_aggregator.average();
    if (m_aggregator.submissions() == 0)
        return m_freshAggregator.average();
    auto established = m_aggregator.average();
    if (!established)
        return established.error();
    auto fresh = m_freshAggregator.average();
    if (!fresh)
        return fresh.error();
    const double we = m_aggregator.totalWeight(), wn = m_freshAggregator.totalWeight();
    const double lambda = m_freshScale ? m_freshScale(we, wn) : 1.0;
    const double total = we + lambda * wn;
    const double a = we / total, b = lambda * wn / total;
    std::vector<float>& avg = *established;
    for (std::size_t i = 0; i < avg.size(); ++i)
        avg[i] = float(a * double(avg[i]) + b * double((*fresh)[i]));
    return std::move(*established);
}

// Each message scaled to one norm M (the median of the established keys'
// messages, else of the new keys'): each aggregator's average is
// M_own x S / W, so S = avg W / M_own, and the round's average is
// M (S_e + lambda S_n) / (W_e + lambda W_n).
Result<std::vector<float>> RoundState::sparseAverage() const
{
    const diloco::SparseAggregator& e = *m_sparse;
    const diloco::SparseAggregator& n = *m_freshSparse;
    if (n.submissions() == 0)
        return e.average();
    if (e.submissions() == 0)
        return n.average();
    const double we = e.totalWeight(), wn = n.totalWeight();
    const double lambda = m_freshScale ? m_freshScale(we, wn) : 1.0;
    const double total = we + lambda * wn;
    auto established = e.average();
    if (!established)
        return established.error();
    auto fresh = n.average();
    if (!fresh)
        return fresh.error();
    // avg_e already carries M / W_e: (W_e avg_e + lambda W_n avg_n M / M_n) / total.
    const double a = we / total, b = lambda * wn / total * e.medianNorm() / n.medianNorm();
    std::vector<float>& avg = *established;
    for (std::size_t i = 0; i < avg.size(); ++i)
        avg[i] = float(a * double(avg[i]) + b * double((*fresh)[i]));
    return std::move(*established);
}

Result<RoundState::Closed> RoundState::computeClose(const CloseInput& input, const FaultPoint& fault)
{
    if (fault)
        fault("close-begun", openRound());
    auto average = m_sparse ? Result<std::vector<float>>(std::vector<float>()) : this->average();
    if (!average)
        return average.error();
    if (m_sparse && m_sparse->submissions() + m_freshSparse->submissions() == 0)
        return Error::make(engine::errc::kEmpty, "no submissions to average");
    Closed closed;
    closed.savedMomentum = m_outer->momentum();
    closed.savedResidual = m_residual;
    try {
        if (Status s = writeNext(*average, closed, input); !s) {
            restore(closed);
            return s.error();
        }
        if (fault)
            fault("close-written", closed.round);
        if (Status s = commit(closed); !s) {
            restore(closed);
            return s.error();
        }
    } catch (...) {
        restore(closed);
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

void RoundState::restore(Closed& closed)
{
    if (closed.params) // written, never committed
        m_store.removeUncommitted(closed.round);
    (void)m_outer->setMomentum(std::move(closed.savedMomentum));
    m_residual = std::move(closed.savedResidual);
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
    closed.savedMomentum = std::vector<float>();
    closed.savedResidual = std::vector<float>();
    m_version = closed.round;
    m_params = closed.params;
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
