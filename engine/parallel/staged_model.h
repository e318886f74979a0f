#pragma once

// A GPT-2 as the parallel runner drives it: the embeddings, one call per
// transformer block, and the final LayerNorm + LM head + loss, with each
// part's parameters named as in the whole model. Two kinds: the whole model
// on every rank (replicated_gpt.h) and Megatron's tensor-parallel shards
// (tensor_parallel.h). Used from the training thread only.

#include "engine/parallel/zero.h"

#include <set>
#include <string>
#include <vector>

namespace crowdtrain::engine::parallel {

class StagedModel {
public:
    virtual ~StagedModel() = default;

    virtual int64_t blockCount() const = 0;
    // idx [B, T] -> hidden [B, T, D]
    virtual torch::Tensor embed(const torch::Tensor& idx) = 0;
    virtual torch::Tensor block(int64_t i, const torch::Tensor& x) = 0;
    // Mean cross-entropy of the next-token prediction.
    virtual torch::Tensor headLoss(const torch::Tensor& x, const torch::Tensor& targets) = 0;

    // This rank's parameters of each part, with AdamW's weight decay and
    // their share in the gradient norm. The token embedding is in both
    // the embedding's and the head's list (the weights are tied).
    virtual std::vector<ParamInfo> embedParameters() = 0;
    virtual std::vector<ParamInfo> blockParameters(int64_t i) = 0;
    virtual std::vector<ParamInfo> headParameters() = 0;

    // This rank's part of a whole-model tensor, and the whole tensor from
    // every rank's part (collective over the tensor-parallel group).
    virtual torch::Tensor localPart(const std::string& name, const torch::Tensor& whole) = 0;
    virtual torch::Tensor wholeOf(const std::string& name, const torch::Tensor& part) = 0;
    // Frees the parameters not named (those of other pipeline stages).
    virtual void dropExcept(const std::set<std::string>& names) { (void)names; }
};

} // namespace crowdtrain::engine::parallel
