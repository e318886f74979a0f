#include "engine/adamw8bit.h"

#include "engine/cpu_kernels.h"

#include <ATen/Parallel.h>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

namespace crowdtrain::engine {
namespace {

// Decade d (0 = [0.1, 1], 1 = [0.01, 0.1], ...) holds `count(d)` values,
// the midpoints of `count(d)` equal steps across it; 0 and 1 complete the map.
std::array<float, 256> makeMap(bool withSign)
{
    std::vector<float> values{0.0f, 1.0f};
    const int decades = 7;
    for (int d = 0; d < decades; ++d) {
        const int count = (withSign ? 64 : 128) >> d;
        const double top = std::pow(10.0, -d), bottom = top / 10.0;
        for (int i = 0; i < count; ++i) {
            const double value = bottom + (top - bottom) * (i + 0.5) / count;
            values.push_back(float(value));
            if (withSign)
                values.push_back(float(-value));
        }
    }
    // Signed: 2 + 2 * 127 = 256; unsigned: 2 + 254 = 256.
    std::sort(values.begin(), values.end());
    std::array<float, 256> map{};
    std::copy(values.begin(), values.end(), map.begin());
    return map;
}

} // namespace

const std::array<float, 256>& signedMomentMap()
{
    static const std::array<float, 256> map = makeMap(true);
    return map;
}

const std::array<float, 256>& unsignedMomentMap()
{
    static const std::array<float, 256> map = makeMap(false);
    return map;
}

namespace {

// Where std::lower_bound would start for a float, by its top 16 bits (sign,
// exponent and 7 bits of mantissa): the index of the first entry not below
// the smallest float with those bits. A bucket spans under 0.8% of its
// values, and the maps' entries are at least 0.7% apart, so the first entry
// not below x is at most a few past it.
using StartTable = std::array<uint8_t, 65536>;

std::unique_ptr<StartTable> makeStarts(const std::array<float, 256>& map)
{
    auto starts = std::make_unique<StartTable>();
    for (uint32_t key = 0; key < 65536; ++key) {
        const uint32_t bits = key << 16 | (key & 0x8000 ? 0xffff : 0);
        float smallest;
        std::memcpy(&smallest, &bits, sizeof smallest);
        if (std::isnan(smallest))
            smallest = key == 0xff80 ? -std::numeric_limits<float>::infinity() : 0.0f; // NaN is answered first
        const auto at = std::lower_bound(map.begin(), map.end(), smallest) - map.begin();
        (*starts)[key] = uint8_t(std::min<std::ptrdiff_t>(at, 255));
    }
    return starts;
}

const StartTable* startsOf(const std::array<float, 256>& map)
{
    static const auto signedStarts = makeStarts(signedMomentMap());
    static const auto unsignedStarts = makeStarts(unsignedMomentMap());
    if (&map == &signedMomentMap())
        return signedStarts.get();
    if (&map == &unsignedMomentMap())
        return unsignedStarts.get();
    return nullptr;
}

} // namespace

uint8_t quantise(const std::array<float, 256>& map, float x)
{
    const StartTable* starts = startsOf(map);
    if (starts == nullptr)
        return quantiseReference(map, x);
    if (std::isnan(x))
        return 0;
    uint32_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    // std::lower_bound's answer from the bucket's start (a table starts at
    // 255 at most; 256 = above the last entry).
    int at = (*starts)[bits >> 16];
    while (at < 256 && map[std::size_t(at)] < x)
        ++at;
    if (at == 0)
        return 0;
    // x above the last entry is nearer to it than to the one before; the
    // tie goes to the lower entry.
    const int above = std::min(at, 255);
    const float lower = map[std::size_t(above - 1)], upper = map[std::size_t(above)];
    return uint8_t(x - lower <= upper - x ? above - 1 : above);
}

uint8_t quantiseReference(const std::array<float, 256>& map, float x)
{
    const auto above = std::lower_bound(map.begin(), map.end(), x);
    if (above == map.begin())
        return 0;
    if (above == map.end())
        return 255;
    const auto below = above - 1;
    return uint8_t((x - *below <= *above - x ? below : above) - map.begin());
}

bool AdamW8bit::prepare(torch::optim::AdamW& optimizer, float gradScale)
{
    std::size_t count = 0;
    for (const auto& group : optimizer.param_groups()) {
        const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
        for (const auto& p : group.params()) {
            ++count;
            const bool fusable = p.device().is_cpu() && p.scalar_type() == torch::kFloat && p.is_contiguous();
            if (!fusable || o.amsgrad())
                return false;
            if (p.grad().defined()
                && !(p.grad().device().is_cpu() && p.grad().scalar_type() == torch::kFloat && p.grad().is_contiguous()))
                return false;
        }
    }
    if (!beginStep(count))
        return false;
    m_gradScale = gradScale;
    m_items.clear();
    m_blockCounts.clear();
    m_totalBlocks = 0;
    std::size_t index = 0;
    for (auto& group : optimizer.param_groups()) {
        const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
        for (auto& p : group.params()) {
            Moments& moments = m_moments[index++];
            if (!p.grad().defined())
                continue;
            m_items.push_back(makeItem(moments, p.data_ptr<float>(), p.grad().data_ptr<float>(), p.numel(), o));
            m_blockCounts.push_back((p.numel() + kMomentBlock - 1) / kMomentBlock);
            m_totalBlocks += m_blockCounts.back();
        }
    }
    return true;
}

AdamW8bit::Item AdamW8bit::makeItem(
    Moments& moments, float* param, const float* grad, int64_t n, const torch::optim::AdamWOptions& o) const
{
    const auto [beta1, beta2] = o.betas();
    const double biasCorrection1 = 1 - std::pow(beta1, double(m_step));
    const double biasCorrection2 = 1 - std::pow(beta2, double(m_step));
    const int64_t blocks = (n + kMomentBlock - 1) / kMomentBlock;
    if (moments.m.empty()) {
        // Zero moments: code of 0.0 in each map, any scale.
        moments.m.assign(std::size_t(n), int8_t(quantise(signedMomentMap(), 0.0f)));
        moments.v.assign(std::size_t(n), quantise(unsignedMomentMap(), 0.0f));
        moments.mScale.assign(std::size_t(blocks), 0.0f);
        moments.vScale.assign(std::size_t(blocks), 0.0f);
    }
    return {param, grad, &moments, n, float(1 - o.lr() * o.weight_decay()), float(o.lr() / biasCorrection1),
        float(std::sqrt(biasCorrection2)), float(o.eps()), float(beta1), float(beta2)};
}

bool AdamW8bit::beginStep(std::size_t count)
{
    if (m_moments.empty())
        m_moments.resize(count);
    if (m_moments.size() != count)
        return false;
    ++m_step;
    return true;
}

void AdamW8bit::update(std::size_t index, float* param, const float* grad, int64_t numel,
    const torch::optim::AdamWOptions& options, float gradScale)
{
    m_gradScale = gradScale;
    const Item item = makeItem(m_moments.at(index), param, grad, numel, options);
    at::parallel_for(0, (numel + kMomentBlock - 1) / kMomentBlock, 64, [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b)
            runBlock(item, b);
    });
}

torch::Tensor AdamW8bit::moment(std::size_t index, bool second) const
{
    if (index >= m_moments.size() || m_moments[index].m.empty())
        return {};
    const Moments& s = m_moments[index];
    const auto& map = second ? unsignedMomentMap() : signedMomentMap();
    const std::vector<float>& scales = second ? s.vScale : s.mScale;
    torch::Tensor out = torch::empty({int64_t(s.m.size())}, torch::kFloat);
    float* values = out.data_ptr<float>();
    for (std::size_t i = 0; i < s.m.size(); ++i) {
        const uint8_t code = second ? s.v[i] : uint8_t(s.m[i]);
        values[i] = map[code] * scales[i / std::size_t(kMomentBlock)];
    }
    return out;
}

void AdamW8bit::runBlock(const Item& item, int64_t block) const
{
    const auto& mMap = signedMomentMap();
    const auto& vMap = unsignedMomentMap();
    Moments& s = *item.moments;
    const int64_t begin = block * kMomentBlock, end = std::min(item.numel, begin + kMomentBlock);
    const float mScale = s.mScale[std::size_t(block)], vScale = s.vScale[std::size_t(block)];
    float m[kMomentBlock], v[kMomentBlock];
    float mMax = 0, vMax = 0;
    for (int64_t i = begin; i < end; ++i) {
        const int64_t k = i - begin;
        const float g = item.grad[i] * m_gradScale;
        m[k] = item.beta1 * mMap[uint8_t(s.m[std::size_t(i)])] * mScale + (1 - item.beta1) * g;
        v[k] = item.beta2 * vMap[s.v[std::size_t(i)]] * vScale + (1 - item.beta2) * g * g;
        item.param[i] = item.param[i] * item.decay
            - item.stepSize * m[k] / (std::sqrt(v[k]) / item.sqrtBiasCorrection2 + item.eps);
        mMax = std::max(mMax, std::abs(m[k]));
        vMax = std::max(vMax, v[k]);
    }
    s.mScale[std::size_t(block)] = mMax;
    s.vScale[std::size_t(block)] = vMax;
    const float mInverse = mMax > 0 ? 1.0f / mMax : 0.0f, vInverse = vMax > 0 ? 1.0f / vMax : 0.0f;
    for (int64_t i = begin; i < end; ++i) {
        s.m[std::size_t(i)] = int8_t(quantise(mMap, m[i - begin] * mInverse));
        s.v[std::size_t(i)] = quantise(vMap, v[i - begin] * vInverse);
    }
}

void AdamW8bit::run(int64_t beginBlock, int64_t endBlock)
{
    forEachPiece(m_blockCounts, beginBlock, endBlock, [&](std::size_t j, int64_t at, int64_t count) {
        for (int64_t b = at; b < at + count; ++b)
            runBlock(m_items[j], b);
    });
}

bool AdamW8bit::step(torch::optim::AdamW& optimizer, float gradScale)
{
    torch::NoGradGuard noGrad;
    if (!prepare(optimizer, gradScale))
        return false;
    at::parallel_for(0, m_totalBlocks, 64, [&](int64_t begin, int64_t end) { run(begin, end); });
    return true;
}

int64_t AdamW8bit::stateBytes() const
{
    int64_t bytes = 0;
    for (const Moments& s : m_moments)
        bytes += int64_t(s.m.size() + s.v.size() + 4 * (s.mScale.size() + s.vScale.size()));
    return bytes;
}

} // namespace crowdtrain::engine
