#include "net/coordinator/submission_scorer.h"

#include "core/file_io.h"
#include "engine/batch_sampler.h"
#include "engine/diloco/flat_params.h"
#include "net/wire/error_codes.h"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace crowdtrain::coordinator {

SubmissionScorer::SubmissionScorer(const ProjectSpec& spec, diloco::Codec codec, const diloco::SparseLayout* sparse)
    : m_spec(spec)
    , m_codec(codec)
    , m_sparse(sparse)
    , m_draws(std::random_device{}())
    , m_seed((uint64_t(std::random_device{}()) << 32) ^ std::random_device{}())
{ }

bool SubmissionScorer::draw()
{
    const double rate = m_spec.trust.evaluateRate;
    return rate >= 1.0 || (rate > 0.0 && std::uniform_real_distribution<double>(0.0, 1.0)(m_draws) < rate);
}

// The version's windows (whole windows of the validation split, at least
// one) and theta_v's loss on them, once per version.
Status SubmissionScorer::prepare(int64_t version, const std::vector<float>& theta)
{
    if (!m_data) {
        auto data = engine::openDataSet(m_spec.dataDir);
        if (!data)
            return data.error();
        if (data->val.empty())
            return Error::make(net::errc::kNotFound, "the project has no validation shard to score submissions on");
        m_data = std::move(*data);
    }
    if (!m_model) { // its weights are replaced by views at once: no seed needed
        engine::GptConfig config = m_spec.model;
        config.dropout = 0.0;
        m_model = engine::Gpt(config);
        (*m_model)->eval();
    }
    const int64_t block = m_spec.model.blockSize;
    auto sampler
        = engine::BatchSampler::create(engine::wholeShards(m_data->val), block, m_seed + uint64_t(version) * 7919);
    if (!sampler)
        return sampler.error();
    const int64_t windows = std::max<int64_t>(1, m_spec.trust.evaluateTokens / block);
    m_x.assign(std::size_t(windows * block), 0);
    m_y.assign(m_x.size(), 0);
    for (int64_t w = 0; w < windows; ++w)
        sampler->next(1, m_x.data() + w * block, m_y.data() + w * block);
    m_version = -1; // until its loss is in
    auto before = loss(theta.data(), int64_t(theta.size()));
    if (!before)
        return before.error();
    m_before = *before;
    m_version = version;
    return Status::success();
}

// The mean loss of these weights over the windows, in batches of the
// spec's validation size.
Result<double> SubmissionScorer::loss(const float* weights, int64_t n)
{
    if (Status s = diloco::borrow(*m_model, weights, n); !s)
        return s.error();
    torch::NoGradGuard noGrad;
    const int64_t block = m_spec.model.blockSize;
    const int64_t windows = int64_t(m_x.size()) / block;
    const int64_t batch = std::max<int64_t>(1, m_spec.validation.batchSize);
    double sum = 0;
    for (int64_t first = 0; first < windows; first += batch) {
        const int64_t rows = std::min(batch, windows - first);
        const torch::Tensor x = torch::from_blob(m_x.data() + first * block, {rows, block}, torch::kLong);
        const torch::Tensor y = torch::from_blob(m_y.data() + first * block, {rows, block}, torch::kLong);
        sum += (*m_model)->loss(x, y).item<double>() * double(rows);
    }
    return sum / double(windows);
}

Result<SubmissionScorer::Score> SubmissionScorer::score(
    int64_t version, const std::vector<float>& theta, const std::filesystem::path& payload)
{
    const auto start = std::chrono::steady_clock::now();
    if (version != m_version)
        if (Status s = prepare(version, theta); !s)
            return s.error();
    const int64_t n = int64_t(theta.size());
    auto bytes = core::readFile(payload);
    if (!bytes)
        return bytes.error();
    m_local = theta;
    if (m_sparse) {
        diloco::SparseEntries entries;
        auto stats = diloco::inspectSparse(*m_sparse, *bytes, nullptr, &entries);
        if (!stats)
            return stats.error();
        for (std::size_t i = 0; i < entries.value.size(); ++i)
            m_local[std::size_t(entries.position[i])] -= entries.value[i];
    } else if (Status s = diloco::decodeAccumulate(m_codec, *bytes, n, -1.0f, m_local.data()); !s) {
        return s.error();
    }
    auto after = loss(m_local.data(), n);
    if (!after)
        return after.error();
    return Score{version, m_before, *after,
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count()};
}

} // namespace crowdtrain::coordinator
