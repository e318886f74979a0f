#include "engine/host_master.h"

#include <cmath>
#include <limits>
#include <stdexcept>

namespace crowdtrain::engine {

HostMaster::HostMaster(Gpt& model, torch::optim::AdamW& optimizer)
    : m_optimizer(optimizer)
{
    torch::NoGradGuard noGrad;
    int64_t largest = 0;
    bool onGpu = false;
    for (auto& [name, weight] : namedParameters(model)) {
        m_index.emplace(weight.unsafeGetTensorImpl(), m_master.size());
        m_master.emplace_back(name, weight.detach().to(torch::kCPU, torch::kFloat, false, true).contiguous());
        m_deviceWeights.push_back(weight);
        largest = std::max(largest, weight.numel());
        onGpu = onGpu || !weight.device().is_cpu();
    }
    for (const auto& group : m_optimizer.param_groups())
        for (const auto& p : group.params())
            if (!m_index.contains(p.unsafeGetTensorImpl()))
                throw std::logic_error("the host master's optimizer holds a weight the model does not");
    model->to(torch::kBFloat16);
    m_gradStage = torch::empty({largest}, torch::kFloat);
    m_bf16Stage = torch::empty({largest}, torch::TensorOptions().dtype(torch::kBFloat16).pinned_memory(onGpu));
}

torch::Tensor HostMaster::gradientOnHost(const torch::Tensor& grad)
{
    const int64_t n = grad.numel();
    torch::Tensor out = m_gradStage.narrow(0, 0, n);
    if (grad.device().is_cpu()) {
        out.copy_(grad.reshape({-1}));
        return out;
    }
    // bf16 across the bus (half the bytes), widened on the host.
    torch::Tensor staged = m_bf16Stage.narrow(0, 0, n);
    staged.copy_(grad.reshape({-1}).to(torch::kBFloat16));
    out.copy_(staged);
    return out;
}

void HostMaster::copyToDevice(std::size_t j)
{
    torch::Tensor& weight = m_deviceWeights[j];
    const torch::Tensor& master = m_master[j].second;
    if (weight.device().is_cpu()) {
        weight.copy_(master.view(weight.sizes()));
        return;
    }
    torch::Tensor staged = m_bf16Stage.narrow(0, 0, master.numel());
    staged.copy_(master.view({-1}));
    weight.copy_(staged.view(weight.sizes()));
}

void HostMaster::toDevice()
{
    torch::NoGradGuard noGrad;
    for (std::size_t j = 0; j < m_master.size(); ++j)
        copyToDevice(j);
}

double HostMaster::step(double maxNorm)
{
    torch::NoGradGuard noGrad;
    torch::Tensor squares;
    for (const torch::Tensor& weight : m_deviceWeights) {
        const torch::Tensor& grad = weight.grad();
        if (!grad.defined())
            continue;
        const torch::Tensor sum = grad.to(torch::kFloat).square().sum();
        squares = squares.defined() ? squares + sum : sum;
    }
    if (!squares.defined())
        return 0.0;
    const double norm = std::sqrt(squares.item<double>());
    if (!std::isfinite(norm))
        return norm;
    // clip_grad_norm_'s rule, applied as the kernel reads each gradient.
    float gradScale = 1.0f;
    if (maxNorm > 0 && maxNorm / (norm + 1e-6) < 1.0)
        gradScale = float(maxNorm / (norm + 1e-6));
    if (!m_adamW.beginStep(m_master.size()))
        throw std::logic_error("the host master's parameters changed");
    for (const auto& group : m_optimizer.param_groups()) {
        const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
        for (const auto& p : group.params()) {
            if (!p.grad().defined())
                continue;
            const std::size_t j = m_index.at(p.unsafeGetTensorImpl());
            torch::Tensor& master = m_master[j].second;
            const torch::Tensor grad = gradientOnHost(p.grad());
            m_adamW.update(j, master.data_ptr<float>(), grad.data_ptr<float>(), master.numel(), o, gradScale);
            copyToDevice(j);
        }
    }
    return norm;
}

int64_t HostMaster::hostBytes() const
{
    int64_t bytes = m_adamW.stateBytes() + m_gradStage.numel() * 4 + m_bf16Stage.numel() * 2;
    for (const auto& [name, master] : m_master)
        bytes += master.numel() * 4;
    return bytes;
}

} // namespace crowdtrain::engine
