#include "engine/cpu_kernels.h"

#include <ATen/Parallel.h>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <torch/version.h>

// This file is built with -fno-trapping-math -fno-signed-zeros -fno-math-errno
// (engine/CMakeLists.txt): without the first two GCC will not vectorise the
// branch-free exp below, without the last not AdamW's square root.

namespace crowdtrain::engine {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;
constexpr int64_t kGrain = 1 << 15;

// e^x for the range tanh needs: 2^n * p(r), |r| <= ln2 / 2, a degree-6
// polynomial (Cephes' expf); relative error about 2e-7. x is clamped to
// [-40, 40]: tanh(x / 2) has long saturated there, and no product below
// reaches a denormal.
inline float expClamped(float x)
{
    x = x < -40.0f ? -40.0f : (x > 40.0f ? 40.0f : x);
    const float n = float(int32_t(x * 1.44269504088896341f + (x >= 0.0f ? 0.5f : -0.5f)));
    const float r = x - n * 0.693145751953125f - n * 1.428606765330187045e-06f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    const int32_t bits = (int32_t(n) + 127) << 23;
    float scale;
    std::memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

// tanh(u) and 1 - tanh(u)^2 for u = sqrt(2/pi) (v + 0.044715 v^3), both
// from e = exp(2u) so that neither tail cancels: tanh = (e - 1) / (e + 1),
// sech^2 = 4e / (e + 1)^2.
struct TanhParts {
    float tanh;
    float sech2;
};

inline TanhParts tanhOfGeluArgument(float v)
{
    const float e = expClamped(2.0f * kSqrt2OverPi * (v + kCubic * v * v * v));
    const float inv = 1.0f / (e + 1.0f);
    return {(e - 1.0f) * inv, 4.0f * e * inv * inv};
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void geluForward(const float* x, float* y, int64_t n)
{
    for (int64_t i = 0; i < n; ++i)
        y[i] = 0.5f * x[i] * (1.0f + tanhOfGeluArgument(x[i]).tanh);
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void geluBackward(
    const float* x, const float* dy, float* dx, int64_t n)
{
    for (int64_t i = 0; i < n; ++i) {
        const float v = x[i];
        const TanhParts t = tanhOfGeluArgument(v);
        const float du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * v * v);
        dx[i] = dy[i] * (0.5f * (1.0f + t.tanh) + 0.5f * v * t.sech2 * du);
    }
}

template <typename Kernel> void parallelOver(int64_t n, Kernel kernel)
{
    at::parallel_for(0, n, kGrain, [&](int64_t begin, int64_t end) { kernel(begin, end - begin); });
}

class GeluTanhFunction : public torch::autograd::Function<GeluTanhFunction> {
public:
    static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input)
    {
        const torch::Tensor x = input.contiguous();
        torch::Tensor y = torch::empty_like(x);
        const float* in = x.data_ptr<float>();
        float* out = y.data_ptr<float>();
        parallelOver(x.numel(), [&](int64_t at, int64_t count) { geluForward(in + at, out + at, count); });
        ctx->save_for_backward({x});
        return y;
    }

    static torch::autograd::tensor_list backward(
        torch::autograd::AutogradContext* ctx, torch::autograd::tensor_list gradOutputs)
    {
        const torch::Tensor x = ctx->get_saved_variables()[0];
        const torch::Tensor dy = gradOutputs[0].contiguous();
        torch::Tensor dx = torch::empty_like(x);
        const float* in = x.data_ptr<float>();
        const float* gradOut = dy.data_ptr<float>();
        float* gradIn = dx.data_ptr<float>();
        parallelOver(
            x.numel(), [&](int64_t at, int64_t count) { geluBackward(in + at, gradOut + at, gradIn + at, count); });
        return {dx};
    }
};

__attribute__((target_clones("avx512f", "avx2", "default"))) void adamWUpdate(float* __restrict p,
    const float* __restrict g, float* __restrict m, float* __restrict v, int64_t n, float decay, float beta1,
    float beta2, float sqrtBiasCorrection2, float eps, float stepSize, float gradScale)
{
    for (int64_t i = 0; i < n; ++i) {
        const float grad = g[i] * gradScale;
        p[i] *= decay;
        m[i] = m[i] * beta1 + grad * (1.0f - beta1);
        v[i] = v[i] * beta2 + grad * grad * (1.0f - beta2);
        const float denom = __builtin_sqrtf(v[i]) / sqrtBiasCorrection2 + eps;
        p[i] -= stepSize * (m[i] / denom);
    }
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void addIntoKernel(
    float* __restrict dst, const float* __restrict src, int64_t n)
{
    for (int64_t i = 0; i < n; ++i)
        dst[i] += src[i];
}

// Sixteen independent float lanes (one AVX-512 register) so the loop
// vectorises without reassociating a single sum.
__attribute__((target_clones("avx512f", "avx2", "default"))) double sumOfSquaresKernel(const float* x, int64_t n)
{
    constexpr int kLanes = 16;
    float lanes[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes)
        for (int l = 0; l < kLanes; ++l)
            lanes[l] += x[i + l] * x[i + l];
    double sum = 0;
    for (; i < n; ++i)
        sum += double(x[i]) * double(x[i]);
    for (float lane : lanes)
        sum += double(lane);
    return sum;
}

bool fusable(const torch::Tensor& t)
{
    return t.device().is_cpu() && t.scalar_type() == torch::kFloat && t.is_contiguous();
}

} // namespace

void addInto(float* dst, const float* src, int64_t n)
{
    addIntoKernel(dst, src, n);
}

double sumOfSquares(const float* x, int64_t n)
{
    return sumOfSquaresKernel(x, n);
}

bool FusedAdamW::prepare(torch::optim::AdamW& optimizer, float gradScale)
{
    m_items.clear();
    m_sizes.clear();
    m_total = 0;
    for (const auto& group : optimizer.param_groups()) {
        const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
        for (const auto& p : group.params())
            if (p.grad().defined() && (!fusable(p) || !fusable(p.grad()) || o.amsgrad()))
                return false;
    }
    auto& states = optimizer.state();
    for (auto& group : optimizer.param_groups()) {
        const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
        const auto [beta1, beta2] = o.betas();
        for (auto& p : group.params()) {
            if (!p.grad().defined())
                continue;
                // libtorch keys a parameter's state by its TensorImpl: as a string
                // before 2.2, as the pointer itself since.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 2)
            void* const key = p.unsafeGetTensorImpl();
#else
            const std::string key = c10::guts::to_string(p.unsafeGetTensorImpl());
#endif
            auto it = states.find(key);
            if (it == states.end()) {
                auto fresh = std::make_unique<torch::optim::AdamWParamState>();
                fresh->step(0);
                fresh->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
                fresh->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
                it = states.emplace(key, std::move(fresh)).first;
            }
            auto& state = static_cast<torch::optim::AdamWParamState&>(*it->second);
            state.step(state.step() + 1);
            const double biasCorrection1 = 1 - std::pow(beta1, double(state.step()));
            const double biasCorrection2 = 1 - std::pow(beta2, double(state.step()));
            const Scalars scalars{float(1 - o.lr() * o.weight_decay()), float(beta1), float(beta2),
                float(std::sqrt(biasCorrection2)), float(o.eps()), float(o.lr() / biasCorrection1), gradScale};
            m_items.push_back({p.data_ptr<float>(), p.grad().data_ptr<float>(), state.exp_avg().data_ptr<float>(),
                state.exp_avg_sq().data_ptr<float>(), scalars});
            m_sizes.push_back(p.numel());
            m_total += p.numel();
        }
    }
    return true;
}

void FusedAdamW::run(int64_t begin, int64_t end) const
{
    forEachPiece(m_sizes, begin, end, [&](std::size_t j, int64_t at, int64_t count) {
        const Item& item = m_items[j];
        const Scalars& s = item.scalars;
        adamWUpdate(item.param + at, item.grad + at, item.m + at, item.v + at, count, s.decay, s.beta1, s.beta2,
            s.sqrtBiasCorrection2, s.eps, s.stepSize, s.gradScale);
    });
}

void fusedAdamWStep(torch::optim::AdamW& optimizer)
{
    torch::NoGradGuard noGrad;
    FusedAdamW update;
    if (!update.prepare(optimizer)) {
        optimizer.step();
        return;
    }
    at::parallel_for(0, update.size(), kGrain, [&](int64_t begin, int64_t end) { update.run(begin, end); });
}

torch::Tensor geluTanh(const torch::Tensor& x)
{
    if (!x.device().is_cpu() || x.scalar_type() != torch::kFloat)
        return torch::gelu(x, "tanh");
    return GeluTanhFunction::apply(x);
}

} // namespace crowdtrain::engine
