#pragma once

// Megatron-LM's tensor parallel GPT-2 (Shoeybi et al. 2019) over a group
// of t ranks: in each block the attention's qkv projection is split by
// heads (column-parallel) and its output projection by input rows
// (row-parallel), the MLP's first layer by columns and its second by rows,
// so each half of a block needs one all-reduce forward (after the
// row-parallel layer, "g") and one backward (of the input gradient of the
// column-parallel layer, "f"): two of each per block. The token embedding
// is split by vocabulary rows: the lookup all-reduces the rows each rank
// owns, and the tied LM head gives each rank its vocabulary slice of the
// logits, whose cross-entropy takes three all-reduces of one value per
// token (max, sum of exponentials, target logit) instead of gathering the
// logits. LayerNorms, position embeddings and the row-parallel biases are
// replicated (each rank computes the same gradient for them).

#include "engine/gpt_config.h"
#include "engine/parallel/comm.h"
#include "engine/parallel/staged_model.h"

#include <map>

namespace crowdtrain::engine::parallel {

class TensorParallelGpt : public StagedModel {
public:
    // Builds the whole engine::Gpt from the seed (as every other layout
    // does) and keeps this rank's parts. tp must divide n_head and vocab_size.
    TensorParallelGpt(const GptConfig& config, uint64_t seed, torch::Device device, Comm& tp);

    int64_t blockCount() const override { return m_config.nLayer; }
    torch::Tensor embed(const torch::Tensor& idx) override;
    torch::Tensor block(int64_t i, const torch::Tensor& x) override;
    torch::Tensor headLoss(const torch::Tensor& x, const torch::Tensor& targets) override;
    std::vector<ParamInfo> embedParameters() override;
    std::vector<ParamInfo> blockParameters(int64_t i) override;
    std::vector<ParamInfo> headParameters() override;
    torch::Tensor localPart(const std::string& name, const torch::Tensor& whole) override;
    torch::Tensor wholeOf(const std::string& name, const torch::Tensor& part) override;

private:
    enum class Split { None, Rows, Columns, Qkv };
    static Split splitOf(const std::string& name);
    ParamInfo info(const std::string& name);
    const torch::Tensor& p(const std::string& name) const { return m_params.at(name); }

    GptConfig m_config;
    Comm& m_tp;
    std::map<std::string, torch::Tensor> m_params; // this rank's parts, by whole-model name
};

// The Megatron f / g operators and the vocabulary-parallel loss, for tests.
torch::Tensor copyToTensorParallel(const torch::Tensor& x, Comm& tp);
torch::Tensor reduceFromTensorParallel(const torch::Tensor& x, Comm& tp);
// logits [N, V/t]: this rank's vocabulary slice [first, first + V/t).
torch::Tensor vocabParallelCrossEntropy(
    const torch::Tensor& logits, const torch::Tensor& targets, int64_t first, Comm& tp);

} // namespace crowdtrain::engine::parallel
