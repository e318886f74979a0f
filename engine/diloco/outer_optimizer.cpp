#include "engine/diloco/outer_optimizer.h"

#include "engine/error_codes.h"

#include <algorithm>
#include <string>

namespace crowdtrain::diloco {

OuterNesterov::OuterNesterov(int64_t n, OuterOptions options)
    : m_options(options)
    , m_momentum(static_cast<std::size_t>(std::max<int64_t>(n, 0)), 0.0f)
{ }

std::vector<float> OuterNesterov::step(const float* averagedDelta)
{
    std::vector<float> update(m_momentum.size());
    step(averagedDelta, update.data());
    return update;
}

void OuterNesterov::step(const float* averagedDelta, float* update)
{
    // float32 coefficients, as PyTorch applies double hyper-parameters to
    // float tensors.
    const float mu = float(m_options.momentum);
    const float minusLr = float(-m_options.lr);
    const bool nesterov = m_options.nesterov;
    float* m = m_momentum.data();
    const auto n = int64_t(m_momentum.size());
    for (int64_t i = 0; i < n; ++i) {
        const float g = averagedDelta[i];
        m[i] = mu * m[i] + g;
        const float stepValue = nesterov ? g + mu * m[i] : m[i];
        update[i] = minusLr * stepValue;
    }
}

Status OuterNesterov::loadMomentum(std::span<const float> momentum)
{
    if (momentum.size() != m_momentum.size())
        return Error::make(engine::errc::kBadSize,
            "momentum has " + std::to_string(momentum.size()) + " elements, expected "
                + std::to_string(m_momentum.size()));
    std::copy(momentum.begin(), momentum.end(), m_momentum.begin());
    return Status::success();
}

Status OuterNesterov::setMomentum(std::vector<float> momentum)
{
    if (momentum.size() != m_momentum.size())
        return Error::make(engine::errc::kBadSize,
            "momentum has " + std::to_string(momentum.size()) + " elements, expected "
                + std::to_string(m_momentum.size()));
    m_momentum = std::move(momentum);
    return Status::success();
}

} // namespace crowdtrain::diloco
