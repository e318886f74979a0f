#include "engine/fused_update.h"

#include <cmath>
#include <map>
#include <optional>
#include <torch/version.h>

#if TORCH_VERSION_MAJOR >= 2
#define CROWDTRAIN_FUSED_ADAMW 1
#endif

namespace crowdtrain::engine {
namespace {

struct Group {
    std::vector<torch::Tensor> params, grads, expAvgs, expAvgSqs, steps;
    std::vector<int64_t> stepsBefore;
};

// The total L2 norm of the gradients, as clip_grad_norm_ takes it: each
// tensor's norm (one multi-tensor kernel), then the norm of those.
torch::Tensor totalNorm(const std::vector<torch::Tensor>& grads)
{
    const std::vector<torch::Tensor> norms = at::_foreach_norm(grads, 2);
    return torch::stack(norms).to(torch::kFloat).norm();
}

// AdamW as libtorch's AdamW::step() computes it, for one parameter, written
// only where `finite` holds. gradScale: the clipping coefficient, or undefined.
void maskedAdamW(const torch::optim::AdamWOptions& o, torch::Tensor& p, const torch::Tensor& g, torch::Tensor& m,
    torch::Tensor& v, int64_t step, const torch::Tensor& gradScale, const torch::Tensor& finite)
{
    const auto [beta1, beta2] = o.betas();
    const torch::Tensor grad = gradScale.defined() ? g * gradScale : g;
    const double biasCorrection1 = 1 - std::pow(beta1, double(step));
    const double biasCorrection2 = 1 - std::pow(beta2, double(step));
    const torch::Tensor newM = m * beta1 + grad * (1 - beta1);
    const torch::Tensor newV = (v * beta2).addcmul(grad, grad, 1 - beta2);
    const torch::Tensor denom = newV.sqrt() / std::sqrt(biasCorrection2) + o.eps();
    const torch::Tensor newP = (p * (1 - o.lr() * o.weight_decay())).addcdiv(newM, denom, -o.lr() / biasCorrection1);
    m.copy_(torch::where(finite, newM, m));
    v.copy_(torch::where(finite, newV, v));
    p.copy_(torch::where(finite, newP, p));
}

} // namespace

torch::optim::AdamWParamState& adamWStateOf(torch::optim::AdamW& optimizer, const torch::Tensor& param)
{
    // libtorch keys a parameter's state by its TensorImpl: as a string before
    // 2.2, as the pointer itself since.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 2)
    void* const key = param.unsafeGetTensorImpl();
#else
    const std::string key = c10::guts::to_string(param.unsafeGetTensorImpl());
#endif
    auto& states = optimizer.state();
    auto it = states.find(key);
    if (it == states.end()) {
        auto fresh = std::make_unique<torch::optim::AdamWParamState>();
        fresh->step(0);
        fresh->exp_avg(torch::zeros_like(param, torch::MemoryFormat::Preserve));
        fresh->exp_avg_sq(torch::zeros_like(param, torch::MemoryFormat::Preserve));
        it = states.emplace(key, std::move(fresh)).first;
    }
    return static_cast<torch::optim::AdamWParamState&>(*it->second);
}

bool SyncFreeAdamW::fusedOn(torch::Device device)
{
#ifdef CROWDTRAIN_FUSED_ADAMW
    // The CPU's fused kernel (libtorch >= 2.4) reads each step count with
    // item(): a CPU takes engine/cpu_kernels.h's kernel instead.
    return device.is_cuda();
#else
    (void)device;
    return false;
#endif
}

std::string SyncFreeAdamW::describe(torch::Device device)
{
    return fusedOn(device) ? "at::_fused_adamw_ (multi-tensor), clip and skip on the device"
                           : "per-tensor AdamW ops masked on the device's finite flag (no fused kernel here)";
}

torch::Tensor SyncFreeAdamW::step(torch::optim::AdamW& optimizer, double maxNorm)
{
    torch::NoGradGuard noGrad;
    m_pending.clear();
    std::vector<torch::Tensor> allGrads;
    std::optional<torch::Device> device;
    for (auto& group : optimizer.param_groups())
        for (auto& p : group.params()) {
            device = device.value_or(p.device());
            if (p.grad().defined())
                allGrads.push_back(p.grad());
        }
    if (allGrads.empty())
        return torch::zeros({}, torch::dtype(torch::kFloat).device(device.value_or(torch::kCPU)));
    const torch::Tensor norm = totalNorm(allGrads);
    const torch::Tensor finite = torch::isfinite(norm);
    // clip_grad_norm_'s coefficient, min(1, maxNorm / (norm + 1e-6)), as
    // the fused kernel takes it: a divisor of the gradients.
    torch::Tensor gradDivisor, gradScale;
    if (maxNorm > 0 && std::isfinite(maxNorm)) {
        gradDivisor = ((norm + 1e-6) / maxNorm).clamp_min(1.0);
        gradScale = (maxNorm / (norm + 1e-6)).clamp_max(1.0);
    }
    const bool fused = fusedOn(*device);
    c10::optional<at::Tensor> divisor, foundInf;
    if (fused) {
        if (gradDivisor.defined())
            divisor = gradDivisor;
        foundInf = finite.logical_not().to(torch::kFloat);
    }
    // One device tensor per distinct step count (all parameters share one in
    // practice): the fused kernel reads it, never the host.
    std::map<int64_t, torch::Tensor> stepTensors;
    for (auto& group : optimizer.param_groups()) {
        const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
        TORCH_CHECK(!o.amsgrad(), "the sync-free AdamW has no amsgrad");
        Group g;
        for (auto& p : group.params()) {
            if (!p.grad().defined())
                continue;
            auto& state = adamWStateOf(optimizer, p);
            m_pending.push_back(&state);
            g.params.push_back(p);
            g.grads.push_back(p.grad());
            g.expAvgs.push_back(state.exp_avg());
            g.expAvgSqs.push_back(state.exp_avg_sq());
            g.stepsBefore.push_back(state.step());
            if (fused) {
                auto [it, added] = stepTensors.try_emplace(state.step());
                if (added)
                    it->second = torch::full({}, double(state.step() + 1), torch::dtype(torch::kFloat).device(*device));
                g.steps.push_back(it->second);
            }
        }
        if (g.params.empty())
            continue;
        const auto [beta1, beta2] = o.betas();
#ifdef CROWDTRAIN_FUSED_ADAMW
        if (fused) {
            at::_fused_adamw_(g.params, g.grads, g.expAvgs, g.expAvgSqs, {}, g.steps, o.lr(), beta1, beta2,
                o.weight_decay(), o.eps(), /*amsgrad=*/false, /*maximize=*/false, divisor, foundInf);
            continue;
        }
#endif
        (void)beta1;
        (void)beta2;
        (void)gradDivisor;
        for (std::size_t i = 0; i < g.params.size(); ++i)
            maskedAdamW(
                o, g.params[i], g.grads[i], g.expAvgs[i], g.expAvgSqs[i], g.stepsBefore[i] + 1, gradScale, finite);
    }
    return norm;
}

void SyncFreeAdamW::finish(bool applied)
{
    if (applied)
        for (auto* state : m_pending)
            state->step(state->step() + 1);
    m_pending.clear();
}

} // namespace crowdtrain::engine
