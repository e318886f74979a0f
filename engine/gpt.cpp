#include "engine/gpt.h"

#include "engine/cpu_kernels.h"

#include <cmath>
#include <torch/version.h>

namespace crowdtrain::engine {
namespace {

torch::nn::LayerNorm layerNorm(int64_t d)
{
    return torch::nn::LayerNorm(torch::nn::LayerNormOptions({d}).eps(1e-5));
}

torch::Tensor causalAttention(
    const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, double dropout, bool training)
{
#if TORCH_VERSION_MAJOR >= 2
    // Fused kernels (flash / memory-efficient) where the build has them.
    return at::scaled_dot_product_attention(q, k, v, {}, training ? dropout : 0.0, /*is_causal=*/true);
#else
    // libtorch 1.x has no public fused attention: the same math, with the
    // causal mask added inside the batched product (one pass, no masked_fill).
    const int64_t b = q.size(0), h = q.size(1), t = q.size(2), hd = q.size(3);
    const auto mask = torch::full({t, t}, -std::numeric_limits<float>::infinity(), q.options()).triu(1);
    auto scores = torch::baddbmm(mask.expand({b * h, t, t}), q.reshape({b * h, t, hd}),
        k.reshape({b * h, t, hd}).transpose(1, 2), /*beta=*/1.0, /*alpha=*/1.0 / std::sqrt(double(hd)));
    auto weights = torch::softmax(scores, -1);
    if (training && dropout > 0.0)
        weights = torch::dropout(weights, dropout, true);
    return torch::bmm(weights, v.reshape({b * h, t, hd})).view({b, h, t, hd});
#endif
}

} // namespace

CausalSelfAttentionImpl::CausalSelfAttentionImpl(const GptConfig& c)
    : m_nHead(c.nHead)
    , m_dropout(c.dropout)
{
    m_cAttn = register_module("c_attn", torch::nn::Linear(c.nEmbd, 3 * c.nEmbd));
    m_cProj = register_module("c_proj", torch::nn::Linear(c.nEmbd, c.nEmbd));
    m_residDropout = register_module("resid_dropout", torch::nn::Dropout(c.dropout));
}

torch::Tensor CausalSelfAttentionImpl::forward(const torch::Tensor& x)
{
    const int64_t b = x.size(0), t = x.size(1), d = x.size(2);
    auto qkv = m_cAttn->forward(x).split(d, 2);
    auto heads = [&](const torch::Tensor& y) { return y.view({b, t, m_nHead, d / m_nHead}).transpose(1, 2); };
    auto y = causalAttention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), m_dropout, is_training());
    y = y.transpose(1, 2).contiguous().view({b, t, d});
    return m_residDropout->forward(m_cProj->forward(y));
}

MlpImpl::MlpImpl(const GptConfig& c)
{
    m_cFc = register_module("c_fc", torch::nn::Linear(c.nEmbd, 4 * c.nEmbd));
    m_cProj = register_module("c_proj", torch::nn::Linear(4 * c.nEmbd, c.nEmbd));
    m_dropout = register_module("dropout", torch::nn::Dropout(c.dropout));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x)
{
    return m_dropout->forward(m_cProj->forward(geluTanh(m_cFc->forward(x))));
}

BlockImpl::BlockImpl(const GptConfig& c)
{
    m_ln1 = register_module("ln_1", layerNorm(c.nEmbd));
    m_attn = register_module("attn", CausalSelfAttention(c));
    m_ln2 = register_module("ln_2", layerNorm(c.nEmbd));
    m_mlp = register_module("mlp", Mlp(c));
}

torch::Tensor BlockImpl::forward(torch::Tensor x)
{
    x = x + m_attn->forward(m_ln1->forward(x));
    return x + m_mlp->forward(m_ln2->forward(x));
}

GptImpl::GptImpl(const GptConfig& c)
    : m_config(c)
{
    m_wte = register_module("wte", torch::nn::Embedding(c.vocabSize, c.nEmbd));
    m_wpe = register_module("wpe", torch::nn::Embedding(c.blockSize, c.nEmbd));
    m_drop = register_module("drop", torch::nn::Dropout(c.dropout));
    m_h = register_module("h", torch::nn::ModuleList());
    for (int64_t i = 0; i < c.nLayer; ++i)
        m_h->push_back(Block(c));
    m_lnF = register_module("ln_f", layerNorm(c.nEmbd));

    torch::NoGradGuard noGrad;
    const double residualStd = 0.02 / std::sqrt(2.0 * double(c.nLayer));
    for (auto& item : named_parameters()) {
        const std::string& name = item.key();
        torch::Tensor& param = item.value();
        if (param.dim() < 2) {
            if (name.ends_with(".bias"))
                param.zero_();
            continue;
        }
        const bool residualProjection = name.ends_with("c_proj.weight");
        param.normal_(0.0, residualProjection ? residualStd : 0.02);
    }
}

torch::Tensor GptImpl::embed(const torch::Tensor& idx)
{
    const int64_t t = idx.size(1);
    TORCH_CHECK(t <= m_config.blockSize, "sequence of ", t, " tokens exceeds block_size ", m_config.blockSize);
    const auto positions = torch::arange(t, torch::TensorOptions().dtype(torch::kLong).device(idx.device()));
    return m_drop->forward(m_wte->forward(idx) + m_wpe->forward(positions));
}

torch::Tensor GptImpl::block(int64_t i, const torch::Tensor& x)
{
    return (*m_h)[std::size_t(i)]->as<Block>()->forward(x);
}

torch::Tensor GptImpl::forward(const torch::Tensor& idx)
{
    auto x = embed(idx);
    for (int64_t i = 0; i < blockCount(); ++i)
        x = block(i, x);
    x = m_lnF->forward(x);
    return torch::nn::functional::linear(x, m_wte->weight);
}

namespace {

// The loss in float32 whatever the weights' dtype (bf16 weights: engine/
// host_master.h), as CUDA's autocast computes cross-entropy.
torch::Tensor widened(const torch::Tensor& logits)
{
    return logits.scalar_type() == torch::kBFloat16 ? logits.to(torch::kFloat) : logits;
}

} // namespace

torch::Tensor GptImpl::loss(const torch::Tensor& idx, const torch::Tensor& targets)
{
    const auto logits = widened(forward(idx));
    return torch::nn::functional::cross_entropy(logits.view({-1, logits.size(-1)}), targets.reshape({-1}));
}

torch::Tensor GptImpl::headLoss(const torch::Tensor& x, const torch::Tensor& targets)
{
    const auto logits = widened(torch::nn::functional::linear(m_lnF->forward(x), m_wte->weight));
    return torch::nn::functional::cross_entropy(logits.view({-1, logits.size(-1)}), targets.reshape({-1}));
}

int64_t GptImpl::parameterCount() const
{
    int64_t count = 0;
    for (const auto& p : parameters())
        count += p.numel();
    return count;
}

std::vector<torch::Tensor> GptImpl::decayedParameters() const
{
    std::vector<torch::Tensor> result;
    for (const auto& p : parameters())
        if (p.dim() >= 2)
            result.push_back(p);
    return result;
}

std::vector<torch::Tensor> GptImpl::undecayedParameters() const
{
    std::vector<torch::Tensor> result;
    for (const auto& p : parameters())
        if (p.dim() < 2)
            result.push_back(p);
    return result;
}

std::string attentionKernelName(const GptConfig& c, torch::Device device, bool bf16)
{
#if TORCH_VERSION_MAJOR >= 2
    // The layout the model hands it: heads split from [B, T, C], transposed.
    const auto options = torch::dtype(bf16 && device.is_cuda() ? torch::kBFloat16 : torch::kFloat).device(device);
    const auto q = torch::empty({1, c.blockSize, c.nHead, c.nEmbd / c.nHead}, options).transpose(1, 2);
    // sdp::SDPBackend's values (ATen/native/transformers/sdp_utils_cpp.h).
    switch (at::_fused_sdp_choice(q, q, q, {}, c.dropout, /*is_causal=*/true)) {
    case 0:
        return "math (unfused: matmul, softmax, matmul)";
    case 1:
        return device.is_cuda() ? "flash attention" : "flash attention (CPU)";
    case 2:
        return "memory-efficient attention";
    case 3:
        return "cuDNN attention";
    default:
        return "another backend (" + std::to_string(at::_fused_sdp_choice(q, q, q, {}, c.dropout, true)) + ")";
    }
#else
    (void)c;
    (void)device;
    (void)bf16;
    return "math (libtorch " TORCH_VERSION " has no fused attention: baddbmm, softmax, bmm)";
#endif
}

} // namespace crowdtrain::engine
