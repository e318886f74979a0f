#include "engine/parallel/stage_runner.h"

#include <ATen/autocast_mode.h>
#include <set>
#include <torch/version.h>

namespace crowdtrain::engine::parallel {
namespace {

// bf16 autocast on the tensors' device for the scope's life.
class Autocast {
public:
    Autocast(bool enabled, torch::Device device)
        : m_enabled(enabled)
        , m_cuda(device.is_cuda())
    {
        set(m_enabled);
    }
    ~Autocast()
    {
        if (m_enabled) {
            set(false);
            at::autocast::clear_cache();
        }
    }
    Autocast(const Autocast&) = delete;
    Autocast& operator=(const Autocast&) = delete;

private:
    void set(bool on) const
    {
        if (!m_enabled)
            return;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
        const auto type = m_cuda ? at::kCUDA : at::kCPU;
        at::autocast::set_autocast_dtype(type, at::kBFloat16);
        at::autocast::set_autocast_enabled(type, on);
#else
        if (m_cuda) {
            at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
            at::autocast::set_enabled(on);
        } else {
            at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
            at::autocast::set_cpu_enabled(on);
        }
#endif
    }

    bool m_enabled;
    bool m_cuda;
};

} // namespace

std::vector<std::vector<ParamInfo>> stageUnits(StagedModel& model, const StageLayout& layout)
{
    std::vector<std::vector<ParamInfo>> units(1);
    std::set<std::string> seen;
    auto addRoot = [&](std::vector<ParamInfo> params) {
        for (auto& p : params)
            if (seen.insert(p.name).second)
                units[0].push_back(p);
    };
    if (layout.first)
        addRoot(model.embedParameters());
    if (layout.last)
        addRoot(model.headParameters());
    for (int64_t i = layout.blockBegin; i < layout.blockEnd; ++i)
        units.push_back(model.blockParameters(i));
    return units;
}

StageRunner::StageRunner(
    StagedModel& model, ZeroOptimizer& zero, StageLayout layout, bool checkpointing, bool bf16, torch::Device device)
    : m_model(model)
    , m_zero(zero)
    , m_layout(layout)
    , m_checkpointing(checkpointing)
    , m_bf16(bf16)
    , m_device(device)
{ }

torch::Tensor StageRunner::forward(int64_t slot, const torch::Tensor& input, const torch::Tensor& targets)
{
    const bool keep = torch::GradMode::is_enabled();
    Saved saved;
    m_zero.gather(0);
    torch::Tensor x;
    if (m_layout.first) {
        Autocast autocast(m_bf16, m_device);
        x = saved.embedded = m_model.embed(input);
    } else {
        x = input;
    }
    for (int64_t i = m_layout.blockBegin; i < m_layout.blockEnd; ++i) {
        const auto unit = std::size_t(1 + i - m_layout.blockBegin);
        m_zero.gather(unit);
        torch::Tensor in = keep ? x.detach().requires_grad_(true) : x;
        {
            Autocast autocast(m_bf16, m_device);
            if (keep && m_checkpointing) {
                torch::NoGradGuard noGrad;
                x = m_model.block(i, in);
            } else {
                x = m_model.block(i, in);
            }
        }
        m_zero.release(unit);
        if (keep)
            saved.blocks.emplace_back(in, m_checkpointing ? torch::Tensor() : x);
    }
    torch::Tensor out = x;
    if (m_layout.last) {
        saved.headInput = keep ? x.detach().requires_grad_(true) : x;
        Autocast autocast(m_bf16, m_device);
        out = saved.loss = m_model.headLoss(saved.headInput, targets);
    }
    if (keep)
        m_saved[slot] = std::move(saved);
    else
        m_zero.release(0);
    return m_layout.last ? out : out.detach();
}

torch::Tensor StageRunner::backward(int64_t slot, const torch::Tensor& gradOutput, double lossScale)
{
    auto found = m_saved.find(slot);
    TORCH_CHECK(found != m_saved.end(), "backward of micro-batch ", slot, " without its forward");
    Saved saved = std::move(found->second);
    m_saved.erase(found);
    m_zero.beginBackward(0);
    torch::Tensor grad = gradOutput;
    if (m_layout.last) {
        (saved.loss * lossScale).backward();
        grad = saved.headInput.grad();
    }
    for (int64_t i = m_layout.blockEnd - 1; i >= m_layout.blockBegin; --i) {
        const auto unit = std::size_t(1 + i - m_layout.blockBegin);
        auto& [in, out] = saved.blocks[std::size_t(i - m_layout.blockBegin)];
        m_zero.gather(unit);
        m_zero.beginBackward(unit);
        if (!out.defined()) {
            Autocast autocast(m_bf16, m_device);
            out = m_model.block(i, in);
        }
        torch::autograd::backward({out}, {grad});
        out = torch::Tensor(); // frees the block's graph before the next
        m_zero.endBackward(unit);
        m_zero.release(unit);
        grad = in.grad();
    }
    if (m_layout.first) {
        torch::autograd::backward({saved.embedded}, {grad});
        grad = torch::Tensor();
    }
    m_zero.endBackward(0);
    if (m_saved.empty())
        m_zero.release(0);
    return grad;
}

} // namespace crowdtrain::engine::parallel
