#include "engine/parallel/tensor_parallel.h"

#include "engine/cpu_kernels.h"
#include "engine/gpt.h"

#include <cmath>
#include <torch/version.h>

namespace crowdtrain::engine::parallel {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

Comm& commOf(AutogradContext* ctx)
{
    return *reinterpret_cast<Comm*>(ctx->saved_data["comm"].toInt());
}

// The sum over the group of a copy of t, in fp32 (Gloo and autocast alike),
// back in t's dtype.
torch::Tensor summed(const torch::Tensor& t, Comm& tp)
{
    torch::Tensor buffer = t.to(torch::kFloat, false, /*copy=*/true).contiguous();
    tp.allreduceSum(buffer);
    return buffer.to(t.scalar_type());
}

struct CopyToRegion : torch::autograd::Function<CopyToRegion> {
    static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t comm)
    {
        ctx->saved_data["comm"] = comm;
        return x;
    }
    static variable_list backward(AutogradContext* ctx, variable_list grads)
    {
        return {summed(grads[0], commOf(ctx)), torch::Tensor()};
    }
};

struct ReduceFromRegion : torch::autograd::Function<ReduceFromRegion> {
    static torch::Tensor forward(AutogradContext*, const torch::Tensor& x, int64_t comm)
    {
        return summed(x, *reinterpret_cast<Comm*>(comm));
    }
    static variable_list backward(AutogradContext*, variable_list grads) { return {grads[0], torch::Tensor()}; }
};

struct VocabParallelLoss : torch::autograd::Function<VocabParallelLoss> {
    static torch::Tensor forward(
        AutogradContext* ctx, const torch::Tensor& logitsIn, const torch::Tensor& targets, int64_t first, int64_t comm)
    {
        Comm& tp = *reinterpret_cast<Comm*>(comm);
        const torch::Tensor logits = logitsIn.to(torch::kFloat);
        const int64_t slice = logits.size(1);
        torch::Tensor max = std::get<0>(logits.max(1)).contiguous();
        tp.allreduceMax(max);
        const torch::Tensor shifted = logits - max.unsqueeze(1);
        const torch::Tensor outside = (targets < first).logical_or(targets >= first + slice);
        const torch::Tensor local = (targets - first).masked_fill(outside, 0);
        torch::Tensor target = shifted.gather(1, local.unsqueeze(1)).squeeze(1).masked_fill(outside, 0).contiguous();
        tp.allreduceSum(target);
        const torch::Tensor exps = shifted.exp();
        torch::Tensor sums = exps.sum(1).contiguous();
        tp.allreduceSum(sums);
        ctx->save_for_backward({exps / sums.unsqueeze(1), local, outside});
        ctx->saved_data["dtype"] = int64_t(logitsIn.scalar_type());
        return (sums.log() - target).mean();
    }
    static variable_list backward(AutogradContext* ctx, variable_list grads)
    {
        const auto saved = ctx->get_saved_variables();
        torch::Tensor grad = saved[0].clone();
        const torch::Tensor hit = saved[2].logical_not().to(grad.scalar_type());
        grad.scatter_add_(1, saved[1].unsqueeze(1), -hit.unsqueeze(1));
        grad.mul_(grads[0] / double(grad.size(0)));
        const auto dtype = static_cast<c10::ScalarType>(ctx->saved_data["dtype"].toInt());
        return {grad.to(dtype), torch::Tensor(), torch::Tensor(), torch::Tensor()};
    }
};

int64_t handle(Comm& tp)
{
    return reinterpret_cast<int64_t>(&tp);
}

torch::Tensor causalAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v)
{
#if TORCH_VERSION_MAJOR >= 2
    return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
#else
    const int64_t b = q.size(0), h = q.size(1), t = q.size(2), hd = q.size(3);
    const auto mask = torch::full({t, t}, -std::numeric_limits<float>::infinity(), q.options()).triu(1);
    auto scores = torch::baddbmm(mask.expand({b * h, t, t}), q.reshape({b * h, t, hd}),
        k.reshape({b * h, t, hd}).transpose(1, 2), /*beta=*/1.0, /*alpha=*/1.0 / std::sqrt(double(hd)));
    return torch::bmm(torch::softmax(scores, -1), v.reshape({b * h, t, hd})).view({b, h, t, hd});
#endif
}

torch::Tensor layerNorm(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias)
{
    return torch::layer_norm(x, {x.size(-1)}, weight, bias, 1e-5);
}

} // namespace

torch::Tensor copyToTensorParallel(const torch::Tensor& x, Comm& tp)
{
    return CopyToRegion::apply(x, handle(tp));
}

torch::Tensor reduceFromTensorParallel(const torch::Tensor& x, Comm& tp)
{
    return ReduceFromRegion::apply(x, handle(tp));
}

torch::Tensor vocabParallelCrossEntropy(
    const torch::Tensor& logits, const torch::Tensor& targets, int64_t first, Comm& tp)
{
    return VocabParallelLoss::apply(logits, targets, first, handle(tp));
}

TensorParallelGpt::TensorParallelGpt(const GptConfig& config, uint64_t seed, torch::Device device, Comm& tp)
    : m_config(config)
    , m_tp(tp)
{
    torch::manual_seed(seed);
    Gpt whole(config);
    whole->to(device);
    torch::NoGradGuard noGrad;
    for (const auto& item : whole->named_parameters())
        m_params[item.key()] = localPart(item.key(), item.value()).clone().set_requires_grad(true);
}

TensorParallelGpt::Split TensorParallelGpt::splitOf(const std::string& name)
{
    if (name == "wte.weight" || name.ends_with("mlp.c_fc.weight") || name.ends_with("mlp.c_fc.bias"))
        return Split::Rows;
    if (name.ends_with("attn.c_attn.weight") || name.ends_with("attn.c_attn.bias"))
        return Split::Qkv;
    if (name.ends_with("c_proj.weight"))
        return Split::Columns;
    return Split::None;
}

torch::Tensor TensorParallelGpt::localPart(const std::string& name, const torch::Tensor& whole)
{
    const int64_t t = m_tp.size(), r = m_tp.rank();
    switch (splitOf(name)) {
    case Split::Rows:
        return whole.chunk(t, 0)[std::size_t(r)].contiguous();
    case Split::Columns:
        return whole.chunk(t, 1)[std::size_t(r)].contiguous();
    case Split::Qkv: {
        std::vector<torch::Tensor> parts;
        for (const auto& third : whole.chunk(3, 0))
            parts.push_back(third.chunk(t, 0)[std::size_t(r)]);
        return torch::cat(parts, 0).contiguous();
    }
    case Split::None:
        break;
    }
    return whole;
}

torch::Tensor TensorParallelGpt::wholeOf(const std::string& name, const torch::Tensor& part)
{
    const Split split = splitOf(name);
    if (split == Split::None)
        return part;
    const int64_t t = m_tp.size();
    torch::Tensor gathered = torch::empty({t * part.numel()}, part.options());
    m_tp.allgather(part.contiguous(), gathered);
    std::vector<torch::Tensor> parts;
    for (const auto& piece : gathered.chunk(t, 0))
        parts.push_back(piece.view(part.sizes()));
    if (split == Split::Rows)
        return torch::cat(parts, 0);
    if (split == Split::Columns)
        return torch::cat(parts, 1);
    std::vector<torch::Tensor> q, k, v;
    for (const auto& piece : parts) {
        const auto thirds = piece.chunk(3, 0);
        q.push_back(thirds[0]);
        k.push_back(thirds[1]);
        v.push_back(thirds[2]);
    }
    return torch::cat({torch::cat(q, 0), torch::cat(k, 0), torch::cat(v, 0)}, 0);
}

torch::Tensor TensorParallelGpt::embed(const torch::Tensor& idx)
{
    const torch::Tensor& wte = p("wte.weight");
    const int64_t first = m_tp.rank() * wte.size(0);
    const torch::Tensor outside = (idx < first).logical_or(idx >= first + wte.size(0));
    torch::Tensor rows = torch::embedding(wte, (idx - first).masked_fill(outside, 0));
    rows = reduceFromTensorParallel(rows.masked_fill(outside.unsqueeze(-1), 0.0), m_tp);
    const auto positions = torch::arange(idx.size(1), torch::TensorOptions().dtype(torch::kLong).device(idx.device()));
    return rows + torch::embedding(p("wpe.weight"), positions);
}

torch::Tensor TensorParallelGpt::block(int64_t i, const torch::Tensor& xIn)
{
    const std::string h = "h." + std::to_string(i) + ".";
    const int64_t b = xIn.size(0), t = xIn.size(1);
    const int64_t heads = m_config.nHead / m_tp.size(), hd = m_config.nEmbd / m_config.nHead;
    torch::Tensor x = xIn;
    auto y = copyToTensorParallel(layerNorm(x, p(h + "ln_1.weight"), p(h + "ln_1.bias")), m_tp);
    auto qkv = torch::linear(y, p(h + "attn.c_attn.weight"), p(h + "attn.c_attn.bias")).chunk(3, 2);
    auto split = [&](const torch::Tensor& z) { return z.reshape({b, t, heads, hd}).transpose(1, 2); };
    y = causalAttention(split(qkv[0]), split(qkv[1]), split(qkv[2])).transpose(1, 2).reshape({b, t, heads * hd});
    y = reduceFromTensorParallel(torch::linear(y, p(h + "attn.c_proj.weight")), m_tp);
    x = x + (y + p(h + "attn.c_proj.bias"));
    y = copyToTensorParallel(layerNorm(x, p(h + "ln_2.weight"), p(h + "ln_2.bias")), m_tp);
    y = geluTanh(torch::linear(y, p(h + "mlp.c_fc.weight"), p(h + "mlp.c_fc.bias")));
    y = reduceFromTensorParallel(torch::linear(y, p(h + "mlp.c_proj.weight")), m_tp);
    return x + (y + p(h + "mlp.c_proj.bias"));
}

torch::Tensor TensorParallelGpt::headLoss(const torch::Tensor& x, const torch::Tensor& targets)
{
    const torch::Tensor& wte = p("wte.weight");
    auto y = copyToTensorParallel(layerNorm(x, p("ln_f.weight"), p("ln_f.bias")), m_tp);
    const auto logits = torch::linear(y, wte);
    return vocabParallelCrossEntropy(
        logits.reshape({-1, wte.size(0)}), targets.reshape({-1}), m_tp.rank() * wte.size(0), m_tp);
}

ParamInfo TensorParallelGpt::info(const std::string& name)
{
    ParamInfo result;
    result.name = name;
    result.param = m_params.at(name);
    result.normWeight = splitOf(name) == Split::None ? 1.0 / double(m_tp.size()) : 1.0;
    return result;
}

std::vector<ParamInfo> TensorParallelGpt::embedParameters()
{
    return {info("wte.weight"), info("wpe.weight")};
}

std::vector<ParamInfo> TensorParallelGpt::blockParameters(int64_t i)
{
    std::vector<ParamInfo> result;
    const std::string h = "h." + std::to_string(i) + ".";
    for (const char* suffix :
        {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias",
            "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"})
        result.push_back(info(h + suffix));
    return result;
}

std::vector<ParamInfo> TensorParallelGpt::headParameters()
{
    return {info("ln_f.weight"), info("ln_f.bias"), info("wte.weight")};
}

} // namespace crowdtrain::engine::parallel
