// A ProjectRuntime's round close (average, outer step, quantised update,
// evaluation, atomic commit, checkpoint) and its read-only queries.

#include "net/coordinator/project_runtime.h"

#include "engine/batch_sampler.h"

#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>

namespace crowdtrain::coordinator {
namespace {

constexpr uint64_t kValidationSeed = 0x5eed;

int64_t unixNowMs()
{
    using namespace std::chrono;
    return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

net::CheckpointInfo wireCheckpoint(const CheckpointInfo& c)
{
    net::CheckpointInfo wire;
    wire.round = uint64_t(c.round);
    wire.version = uint64_t(c.round);
    wire.tokens = uint64_t(c.tokens);
    wire.valLoss = c.valLoss;
    wire.createdMs = uint64_t(c.createdMs);
    for (const CheckpointFile& f : c.files)
        wire.files.push_back({f.name, f.bytes, f.sha256, "checkpoint/round-" + std::to_string(c.round) + "/" + f.name});
    return wire;
}

net::ContributorRow wireContributor(const LeaderboardEntry& e)
{
    return {
        e.displayName, e.publicKey, uint64_t(e.tokens), uint64_t(e.accepted), uint64_t(e.rejected), e.computeSeconds};
}

} // namespace

// Mean validation loss of theta over fixed windows of the val shards (the
// same windows every round, so the curve compares like with like).
std::optional<double> ProjectRuntime::evaluate(const std::vector<float>& params)
{
    if (m_data->val.empty() || m_spec.validation.batches <= 0)
        return std::nullopt;
    auto sampler
        = engine::BatchSampler::create(engine::wholeShards(m_data->val), m_spec.model.blockSize, kValidationSeed);
    if (!sampler)
        return std::nullopt;
    if (!diloco::assign(m_model, params.data(), int64_t(params.size())))
        return std::nullopt;
    torch::NoGradGuard noGrad;
    const int64_t b = m_spec.validation.batchSize, t = m_spec.model.blockSize;
    std::vector<int64_t> x(std::size_t(b * t)), y(x.size());
    double sum = 0;
    for (int64_t i = 0; i < m_spec.validation.batches; ++i) {
        sampler->next(b, x.data(), y.data());
        sum += m_model
                   ->loss(torch::from_blob(x.data(), {b, t}, torch::kLong),
                       torch::from_blob(y.data(), {b, t}, torch::kLong))
                   .item<double>();
    }
    return sum / double(m_spec.validation.batches);
}

// The state file's service bytes: the accepted norms of the round it closes,
// which the norm gate compares the next round's submissions with.
std::string ProjectRuntime::serviceBytes() const
{
    nlohmann::json norms = nlohmann::json::array();
    for (const Accepted& a : m_accepted)
        norms.push_back(a.norm);
    return nlohmann::json{{"accepted_norms", norms}}.dump();
}

Status ProjectRuntime::restoreServiceBytes(const std::string& bytes)
{
    if (bytes.empty()) // version 0, or written before the norms were kept
        return Status::success();
    const auto json = nlohmann::json::parse(bytes, nullptr, false);
    if (!json.is_object() || !json.contains("accepted_norms") || !json["accepted_norms"].is_array())
        return Error::make("state_corrupt", "the state file's service bytes are not a norm record");
    std::vector<double> norms;
    for (const auto& norm : json["accepted_norms"]) {
        if (!norm.is_number() || !std::isfinite(norm.get<double>()) || norm.get<double>() < 0)
            return Error::make("state_corrupt", "the state file's accepted norms hold " + norm.dump());
        norms.push_back(norm.get<double>());
    }
    m_normGate.restore({std::move(norms), {}});
    return Status::success();
}

Result<PublishedEvents> ProjectRuntime::closeRound(int64_t nowMs)
{
    auto average = m_aggregator->average();
    if (!average)
        return average.error();
    // Delta = theta_v - theta_local plays the gradient: theta_{v+1} = theta_v + u,
    // with u quantised (error feedback on our side) so that volunteers who
    // apply the same bytes get the same weights, bit for bit.
    std::vector<float> savedMomentum = m_outer->momentum();
    std::vector<float> savedResidual = m_residual;
    std::vector<float> update = m_outer->step(average->data());
    const std::string encoded = diloco::encode(diloco::Codec::Int8, update.data(), m_parameters, m_residual.data());
    std::vector<float> next = m_params;
    if (Status s = diloco::applyUpdate(diloco::Codec::Int8, encoded, m_parameters, next.data()); !s)
        return s.error();

    double lossSum = 0;
    for (const Accepted& a : m_accepted)
        lossSum += a.record.trainLoss * double(a.record.tokens);
    RoundCommit commit;
    commit.record.round = m_version + 1;
    commit.record.trainLoss = lossSum / double(m_acceptedTokens);
    commit.record.volunteersOnline = int64_t(volunteersOnline());
    commit.record.closedAtMs = nowMs;
    for (const Accepted& a : m_accepted)
        commit.contributions.push_back(a.record);
    commit.dataProgress = RoundCommit::DataProgress{int64_t(m_plan->epoch()), int64_t(m_plan->completedCount()),
        int64_t(m_plan->rangeCount()), m_plan->serialize()};
    GlobalState state{m_version + 1, next, m_outer->momentum(), m_residual, serviceBytes()};
    if (Status s = m_store->commit(state, commit, encoded); !s) {
        // Nothing changed on disk: the round stays open and the next tick tries again.
        (void)m_outer->setMomentum(std::move(savedMomentum));
        m_residual = std::move(savedResidual);
        return s.error();
    }

    // Committed: the new version is the truth from here on.
    const int64_t round = m_version + 1;
    m_version = round;
    m_params = std::move(next);
    m_paramsSha = parametersSha256Hex(m_params);
    m_totalTokens += m_acceptedTokens;
    PublishedEvents events;
    auto rejected = m_store->ledger().rejectionsInRound(round);
    net::RoundClosedEvent closed{uint64_t(round), uint64_t(m_version), commit.record.trainLoss, std::nullopt,
        uint64_t(m_acceptedTokens), uint64_t(m_accepted.size()), rejected ? uint64_t(rejected->size()) : 0,
        volunteersOnline()};
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(pendingDir(), ec))
        std::filesystem::remove(entry.path(), ec);
    m_aggregator->reset();
    m_normGate.closeRound();
    m_accepted.clear();
    m_acceptedTokens = 0;
    m_wrappingUp = m_wrapUpAnnounced = false;

    // The new version is served from here on; its validation loss (and the
    // checkpoint that records it) follow when the evaluation thread is done,
    // so volunteers never wait for it.
    finishEvaluation(true, events);
    auto params = std::make_shared<const std::vector<float>>(m_params);
    m_evaluation = PendingEvaluation{round, m_totalTokens, params, closed,
        std::async(std::launch::async, [this, params] { return evaluate(*params); })};
    if (Status s = publishResources(); !s)
        std::fprintf(stderr, "%s: %s\n", m_spec.name.c_str(), s.error().message.c_str());
    events.frames.insert(
        events.frames.begin(), net::encodeEvent(m_spec.name, net::VersionPublishedEvent{uint64_t(m_version)}));
    return events;
}

void ProjectRuntime::finishEvaluation(bool wait, PublishedEvents& events)
{
    if (!m_evaluation)
        return;
    if (!wait && m_evaluation->loss.wait_for(std::chrono::seconds(0)) != std::future_status::ready)
        return;
    PendingEvaluation done = std::move(*m_evaluation);
    m_evaluation.reset();
    const std::optional<double> valLoss = done.loss.get();
    if (valLoss)
        if (Status s = m_store->ledger().setValidationLoss(done.round, *valLoss); !s)
            std::fprintf(stderr, "%s: %s\n", m_spec.name.c_str(), s.error().message.c_str());
    if (done.round == m_version)
        m_lastValLoss = valLoss;
    done.event.valLoss = valLoss;
    events.frames.push_back(net::encodeEvent(m_spec.name, done.event));
    if (!m_checkpoints->isDue(done.round))
        return;
    auto named = unflattenParameters(m_spec.model, *done.params);
    auto published = named ? m_checkpoints->publish(done.round, done.tokens, valLoss, m_spec.model, *named, unixNowMs())
                           : Result<CheckpointInfo>(named.error());
    if (!published) {
        std::fprintf(stderr, "%s: checkpoint of round %lld failed: %s\n", m_spec.name.c_str(),
            static_cast<long long>(done.round), published.error().message.c_str());
        return;
    }
    events.frames.push_back(net::encodeEvent(m_spec.name, net::CheckpointPublishedEvent{wireCheckpoint(*published)}));
    if (Status s = publishResources(); !s)
        std::fprintf(stderr, "%s: %s\n", m_spec.name.c_str(), s.error().message.c_str());
}

Result<net::GetUpdateReply> ProjectRuntime::getUpdate(const net::GetUpdateRequest& request) const
{
    const std::string name = "update-v" + std::to_string(m_version);
    if (int64_t(request.fromVersion) + 1 != m_version || !m_resources.contains(name))
        return Error::make("not_found",
            "no update from version " + std::to_string(request.fromVersion) + " (the project is at version "
                + std::to_string(m_version) + "): download state-v" + std::to_string(m_version));
    auto description = m_resources.describe(name);
    if (!description)
        return description.error();
    return net::GetUpdateReply{request.fromVersion, uint64_t(m_version), "int8", uint64_t(m_parameters), name,
        description->bytes, description->sha256, m_paramsSha};
}

Result<net::ListCheckpointsReply> ProjectRuntime::listCheckpoints() const
{
    auto list = m_checkpoints->list();
    if (!list)
        return list.error();
    net::ListCheckpointsReply reply;
    for (const CheckpointInfo& c : *list)
        reply.checkpoints.push_back(wireCheckpoint(c));
    return reply;
}

Result<net::MetricsReply> ProjectRuntime::metrics(const net::MetricsRequest& request)
{
    auto rows = m_store->ledger().metricHistory(int64_t(request.sinceRound));
    if (!rows)
        return rows.error();
    net::MetricsReply reply;
    for (const MetricSample& m : *rows) {
        if (reply.rows.size() >= request.limit)
            break;
        reply.rows.push_back({uint64_t(m.round), uint64_t(m.tokens), m.trainLoss, m.valLoss,
            uint64_t(m.volunteersOnline), uint64_t(m.timeMs)});
    }
    return reply;
}

Result<net::LeaderboardReply> ProjectRuntime::leaderboard(const net::LeaderboardRequest& request)
{
    auto rows = m_store->ledger().leaderboard(int(request.limit));
    if (!rows)
        return rows.error();
    net::LeaderboardReply reply;
    for (const LeaderboardEntry& e : *rows)
        reply.rows.push_back(wireContributor(e));
    return reply;
}

Result<net::MyStatsReply> ProjectRuntime::myStats(const std::string& key)
{
    auto totals = m_store->ledger().volunteerTotals(key);
    if (!totals)
        return totals.error();
    auto board = m_store->ledger().leaderboard(int(net::kMaxLeaderboardRows));
    if (!board)
        return board.error();
    net::MyStatsReply reply;
    reply.stats = wireContributor(*totals);
    reply.contributors = board->size();
    for (std::size_t i = 0; i < board->size(); ++i)
        if ((*board)[i].publicKey == key)
            reply.rank = i + 1;
    reply.projectTokens = uint64_t(m_totalTokens);
    return reply;
}

} // namespace crowdtrain::coordinator
