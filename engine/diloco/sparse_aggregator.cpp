#include "engine/diloco/sparse_aggregator.h"

#include "engine/error_codes.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace crowdtrain::diloco {

SparseAggregator::SparseAggregator(SparseLayout layout)
    : m_layout(std::move(layout))
{ }

Status SparseAggregator::add(std::string_view message, double weightTokens)
{
    if (m_spent)
        return Error::make(engine::errc::kAggregatorFailed, "the sum was averaged in place: reset() first");
    if (!(std::isfinite(weightTokens) && weightTokens > 0.0)) {
        std::ostringstream why;
        why << "submission weight must be a positive token count, got " << weightTokens;
        return Error::make(engine::errc::kBadWeight, why.str());
    }
    auto stats = inspectSparse(m_layout, message, nullptr, &m_entries);
    if (!stats)
        return stats.error();
    if (!(stats->l2Norm > 0.0))
        return Error::make(engine::errc::kNormTooSmall, "a sparse message of norm 0 cannot be scaled to the median");
    const float weight = float(weightTokens / stats->l2Norm);
    if (m_acc.empty()) // allocated at the first message
        m_acc.assign(size_t(m_layout.elements()), 0.0f);
    float* acc = m_acc.data();
    const int64_t* position = m_entries.position.data();
    const float* value = m_entries.value.data();
    const size_t count = m_entries.value.size();
    for (size_t i = 0; i < count; ++i)
        acc[position[i]] += weight * value[i];
    m_norms.push_back(stats->l2Norm);
    m_totalWeight += weightTokens;
    return Status::success();
}

double SparseAggregator::medianNorm() const
{
    if (m_norms.empty())
        return 0.0;
    std::vector<double> norms = m_norms;
    const size_t mid = norms.size() / 2;
    std::nth_element(norms.begin(), norms.begin() + std::ptrdiff_t(mid), norms.end());
    if (norms.size() % 2 == 1)
        return norms[mid];
    const double lower = *std::max_element(norms.begin(), norms.begin() + std::ptrdiff_t(mid));
    return (lower + norms[mid]) / 2.0;
}

Result<std::span<float>> SparseAggregator::averageInPlace(std::optional<double> norm)
{
    if (m_spent)
        return Error::make(engine::errc::kAggregatorFailed, "the sum was averaged in place: reset() first");
    if (m_norms.empty())
        return Error::make(engine::errc::kEmpty, "no submissions to average");
    const double factor = norm.value_or(medianNorm()) / m_totalWeight;
    for (float& v : m_acc)
        v = float(double(v) * factor);
    m_spent = true;
    return std::span<float>(m_acc);
}

Result<std::vector<float>> SparseAggregator::average() const
{
    if (m_spent)
        return Error::make(engine::errc::kAggregatorFailed, "the sum was averaged in place: reset() first");
    if (m_norms.empty())
        return Error::make(engine::errc::kEmpty, "no submissions to average");
    const double factor = medianNorm() / m_totalWeight;
    std::vector<float> avg(m_acc.size());
    for (size_t i = 0; i < m_acc.size(); ++i)
        avg[i] = float(double(m_acc[i]) * factor);
    return avg;
}

Result<std::string> SparseAggregator::closeRound(double outerLr) const
{
    auto avg = average();
    if (!avg)
        return avg.error();
    const float minusLr = float(-outerLr);
    for (float& v : *avg)
        v = minusLr * v;
    return encodeSparseUpdate(m_layout, avg->data());
}

void SparseAggregator::reset()
{
    m_spent = false;
    std::fill(m_acc.begin(), m_acc.end(), 0.0f);
    m_norms.clear();
    m_totalWeight = 0.0;
}

} // namespace crowdtrain::diloco
