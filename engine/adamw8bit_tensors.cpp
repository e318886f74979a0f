#include "engine/adamw8bit_tensors.h"

#include <cmath>

namespace crowdtrain::engine {
namespace {

torch::Tensor mapTensor(const std::array<float, 256>& values, const torch::Device& device)
{
    return torch::tensor(std::vector<float>(values.begin(), values.end()), torch::kFloat).to(device);
}

// quantise() elementwise: the index of the nearest entry of `map`, the
// lower one on a tie (x - below <= above - x).
torch::Tensor quantiseTensor(const torch::Tensor& map, const torch::Tensor& x)
{
    const torch::Tensor above = torch::searchsorted(map, x, /*out_int32=*/true, /*right=*/false);
    const torch::Tensor upper = above.clamp_max(255);
    const torch::Tensor lower = (above - 1).clamp_min(0);
    const torch::Tensor below = (x - map.index_select(0, lower.reshape({-1})).view_as(x))
        <= (map.index_select(0, upper.reshape({-1})).view_as(x) - x);
    return torch::where(below, lower, upper).to(torch::kByte);
}

torch::Tensor dequantise(const torch::Tensor& map, const torch::Tensor& codes)
{
    return map.index_select(0, codes.reshape(-1).to(torch::kInt)).view(codes.sizes());
}

// 1/x where x > 0, else 0 (an all-zero block), per block as a column.
torch::Tensor inverseOrZero(const torch::Tensor& largest)
{
    return torch::where(largest > 0, largest.reciprocal(), torch::zeros_like(largest)).unsqueeze(1);
}

} // namespace

const torch::Tensor& AdamW8bitTensors::map(bool second, const torch::Device& device)
{
    torch::Tensor& held = second ? m_unsignedMap : m_signedMap;
    if (!held.defined() || held.device() != device)
        held = mapTensor(second ? unsignedMomentMap() : signedMomentMap(), device);
    return held;
}

bool AdamW8bitTensors::step(torch::optim::AdamW& optimizer, float gradScale)
{
    torch::NoGradGuard noGrad;
    std::size_t count = 0;
    for (const auto& group : optimizer.param_groups()) {
        const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
        for (const auto& p : group.params()) {
            ++count;
            if (o.amsgrad() || p.scalar_type() != torch::kFloat || !p.is_contiguous())
                return false;
            const torch::Tensor& g = p.grad();
            if (g.defined() && (g.device() != p.device() || g.sizes() != p.sizes()))
                return false;
        }
    }
    if (m_moments.empty())
        m_moments.resize(count);
    if (m_moments.size() != count)
        return false;
    ++m_step;
    std::size_t index = 0;
    for (auto& group : optimizer.param_groups()) {
        const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
        const auto [beta1, beta2] = o.betas();
        const double biasCorrection1 = 1 - std::pow(beta1, double(m_step));
        const double biasCorrection2 = 1 - std::pow(beta2, double(m_step));
        const Scalars k{float(1 - o.lr() * o.weight_decay()), float(o.lr() / biasCorrection1),
            float(std::sqrt(biasCorrection2)), float(o.eps()), float(beta1), float(beta2), gradScale};
        for (auto& p : group.params()) {
            Moments& s = m_moments[index++];
            if (!p.grad().defined())
                continue;
            const int64_t n = p.numel(), blocks = (n + kMomentBlock - 1) / kMomentBlock;
            if (!s.m.defined()) {
                const auto bytes = torch::TensorOptions().dtype(torch::kByte).device(p.device());
                s.m = torch::full({blocks, kMomentBlock}, int64_t(quantise(signedMomentMap(), 0.0f)), bytes);
                s.v = torch::full({blocks, kMomentBlock}, int64_t(quantise(unsignedMomentMap(), 0.0f)), bytes);
                s.mScale = torch::zeros({blocks}, p.options().dtype(torch::kFloat));
                s.vScale = torch::zeros({blocks}, p.options().dtype(torch::kFloat));
                s.numel = n;
            }
            const torch::Tensor flat = p.view({-1}), grad = p.grad().reshape({-1});
            const int64_t chunkBlocks = kChunkElements / kMomentBlock;
            for (int64_t first = 0; first < blocks; first += chunkBlocks) {
                const int64_t begin = first * kMomentBlock;
                const int64_t end = std::min(n, (first + chunkBlocks) * kMomentBlock);
                updateChunk(flat.narrow(0, begin, end - begin), grad.narrow(0, begin, end - begin), s, first, k);
            }
        }
    }
    return true;
}

// The CPU kernel's runBlock over the blocks from `firstBlock` that `param`
// covers, operation by operation: m = beta1 * map[m] * scale + (1 - beta1)
// * g; v = beta2 * map[v] * scale + (1 - beta2) * g * g; param = param *
// decay - stepSize * m / (sqrt(v) / sqrt(bc2) + eps); then each block
// scaled by its largest magnitude and quantised. Scalars are passed as the
// float32 values the kernel uses; the divisions by a scalar divide by a
// 0-dim tensor, as CUDA multiplies by the reciprocal for a host scalar.
void AdamW8bitTensors::updateChunk(
    const torch::Tensor& param, const torch::Tensor& grad, Moments& s, int64_t firstBlock, const Scalars& k)
{
    const int64_t n = param.numel(), blocks = (n + kMomentBlock - 1) / kMomentBlock;
    const int64_t padding = blocks * kMomentBlock - n;
    torch::Tensor g = grad.to(torch::kFloat).mul(double(k.gradScale));
    if (padding > 0)
        g = torch::constant_pad_nd(g, {0, padding}, 0);
    g = g.view({blocks, kMomentBlock});
    const torch::Tensor mMap = map(false, param.device());
    const torch::Tensor vMap = map(true, param.device());
    torch::Tensor mCodes = s.m.narrow(0, firstBlock, blocks), vCodes = s.v.narrow(0, firstBlock, blocks);
    torch::Tensor mScale = s.mScale.narrow(0, firstBlock, blocks), vScale = s.vScale.narrow(0, firstBlock, blocks);

    const torch::Tensor m
        = dequantise(mMap, mCodes).mul(double(k.beta1)).mul(mScale.unsqueeze(1)).add(g.mul(double(1.0f - k.beta1)));
    const torch::Tensor v = dequantise(vMap, vCodes)
                                .mul(double(k.beta2))
                                .mul(vScale.unsqueeze(1))
                                .add(g.mul(double(1.0f - k.beta2)).mul(g));
    g = torch::Tensor();
    const auto scalar = [&](float value) { return torch::scalar_tensor(double(value), mScale.options()); };
    const torch::Tensor change
        = m.mul(double(k.stepSize)).div(v.sqrt().div(scalar(k.sqrtBiasCorrection2)).add(double(k.eps)));
    param.mul_(double(k.decay)).sub_(change.view({-1}).narrow(0, 0, n));

    const torch::Tensor mMax = m.abs().amax(1), vMax = v.amax(1);
    mScale.copy_(mMax);
    vScale.copy_(vMax);
    mCodes.copy_(quantiseTensor(mMap, m.mul(inverseOrZero(mMax))));
    vCodes.copy_(quantiseTensor(vMap, v.mul(inverseOrZero(vMax))));
}

int64_t AdamW8bitTensors::stateBytes() const
{
    int64_t bytes = 0;
    for (const Moments& s : m_moments)
        if (s.m.defined())
            bytes += s.m.numel() + s.v.numel() + 4 * (s.mScale.numel() + s.vScale.numel());
    return bytes;
}

torch::Tensor AdamW8bitTensors::moment(std::size_t index, bool second) const
{
    if (index >= m_moments.size() || !m_moments[index].m.defined())
        return {};
    const Moments& s = m_moments[index];
    const auto& values = second ? unsignedMomentMap() : signedMomentMap();
    const torch::Tensor cpuMap = mapTensor(values, torch::kCPU);
    const torch::Tensor codes = (second ? s.v : s.m).to(torch::kCPU);
    const torch::Tensor scales = (second ? s.vScale : s.mScale).to(torch::kCPU);
    return dequantise(cpuMap, codes).mul(scales.unsqueeze(1)).view({-1}).narrow(0, 0, s.numel).contiguous();
}

} // namespace crowdtrain::engine
