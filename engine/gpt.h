#pragma once

// GPT-2 in libtorch: learned token + position embeddings, pre-LayerNorm
// blocks of causal self-attention and a tanh-GELU MLP, a final LayerNorm and
// an LM head tied to the token embedding. Parameter names follow Hugging
// Face's GPT-2 without the "transformer." prefix (wte, wpe, h.N.attn.c_attn,
// ..., ln_f) with nn.Linear layouts; engine/hf_gpt2.h maps them to HF's.
// A module is not thread-safe; use one per training loop.

#include "engine/gpt_config.h"

#include <torch/torch.h>

namespace crowdtrain::engine {

class CausalSelfAttentionImpl : public torch::nn::Module {
public:
    explicit CausalSelfAttentionImpl(const GptConfig& config);
    torch::Tensor forward(const torch::Tensor& x);

private:
    int64_t m_nHead;
    double m_dropout;
    torch::nn::Linear m_cAttn{nullptr};
    torch::nn::Linear m_cProj{nullptr};
    torch::nn::Dropout m_residDropout{nullptr};
};
TORCH_MODULE(CausalSelfAttention);

class MlpImpl : public torch::nn::Module {
public:
    explicit MlpImpl(const GptConfig& config);
    torch::Tensor forward(const torch::Tensor& x);

private:
    torch::nn::Linear m_cFc{nullptr};
    torch::nn::Linear m_cProj{nullptr};
    torch::nn::Dropout m_dropout{nullptr};
};
TORCH_MODULE(Mlp);

class BlockImpl : public torch::nn::Module {
public:
    explicit BlockImpl(const GptConfig& config);
    torch::Tensor forward(torch::Tensor x);

private:
    torch::nn::LayerNorm m_ln1{nullptr};
    CausalSelfAttention m_attn{nullptr};
    torch::nn::LayerNorm m_ln2{nullptr};
    Mlp m_mlp{nullptr};
};
TORCH_MODULE(Block);

class GptImpl : public torch::nn::Module {
public:
    // Initialises weights as GPT-2 does: N(0, 0.02), residual projections
    // scaled by 1/sqrt(2 n_layer), zero biases. Seed torch before for
    // reproducible weights. The config must pass validate().
    explicit GptImpl(const GptConfig& config);

    // idx: [B, T] int64 token ids with T <= block_size. Returns logits [B, T, V].
    torch::Tensor forward(const torch::Tensor& idx);
    // Mean cross-entropy of the next-token prediction.
    torch::Tensor loss(const torch::Tensor& idx, const torch::Tensor& targets);

    // forward() and loss() part by part, for activation checkpointing
    // (engine/checkpointing.h): idx -> hidden [B, T, C], block i, and the
    // final LayerNorm + tied LM head + cross-entropy.
    torch::Tensor embed(const torch::Tensor& idx);
    int64_t blockCount() const { return m_config.nLayer; }
    torch::Tensor block(int64_t i, const torch::Tensor& x);
    torch::Tensor headLoss(const torch::Tensor& x, const torch::Tensor& targets);

    const GptConfig& config() const { return m_config; }
    int64_t parameterCount() const;

    // Parameters split for AdamW: 2-D and larger decay, the rest (biases,
    // LayerNorm gains) do not.
    std::vector<torch::Tensor> decayedParameters() const;
    std::vector<torch::Tensor> undecayedParameters() const;

private:
    GptConfig m_config;
    torch::nn::Embedding m_wte{nullptr};
    torch::nn::Embedding m_wpe{nullptr};
    torch::nn::Dropout m_drop{nullptr};
    torch::nn::ModuleList m_h{nullptr};
    torch::nn::LayerNorm m_lnF{nullptr};
};
TORCH_MODULE(Gpt);

// The attention kernel this build's scaled_dot_product_attention picks for
// the model's shape on a device (bf16: the dtype autocast gives it on CUDA),
// in words: "flash attention", "memory-efficient attention", "math", ...
// libtorch 1.x has no fused attention: the model's own math then.
std::string attentionKernelName(const GptConfig& config, torch::Device device, bool bf16);

} // namespace crowdtrain::engine
