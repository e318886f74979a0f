#pragma once

// Forward and backward of one pipeline stage (the whole model when there is
// one stage), part by part: the embeddings on the first stage, a range of
// blocks, the head and loss on the last. Each block runs on a detached copy
// of its input, so the backward goes block by block, and around each the
// ZeRO optimizer gathers and frees the block's parameters (stage 3) and
// reduce-scatters its gradients (stages 2-3). With activation checkpointing
// a block keeps only its input and runs its forward again in the backward.
// bf16: the forward runs under autocast (CPU or CUDA), the weights and
// gradients stay fp32. Several micro-batches may be in flight (slots), as
// 1F1B needs. Used from the training thread only.

#include "engine/parallel/staged_model.h"
#include "engine/parallel/zero.h"

#include <map>

namespace crowdtrain::engine::parallel {

struct StageLayout {
    bool first = true; // holds the embeddings
    bool last = true; // holds the head and computes the loss
    int64_t blockBegin = 0;
    int64_t blockEnd = 0;
};

// The ZeRO units of a stage: unit 0 the embeddings and/or head (the tied
// token embedding once), then one per block.
std::vector<std::vector<ParamInfo>> stageUnits(StagedModel& model, const StageLayout& layout);

class StageRunner {
public:
    StageRunner(StagedModel& model, ZeroOptimizer& zero, StageLayout layout, bool checkpointing, bool bf16,
        torch::Device device);

    // input: token ids on the first stage, else the previous stage's
    // output. Returns the loss on the last stage, else the activation to
    // pass on. Under NoGradGuard nothing is kept for a backward.
    torch::Tensor forward(int64_t slot, const torch::Tensor& input, const torch::Tensor& targets);
    // gradOutput: the gradient of the output (undefined on the last stage,
    // which backpropagates loss * lossScale). Returns the gradient of the
    // input (undefined on the first stage).
    torch::Tensor backward(int64_t slot, const torch::Tensor& gradOutput, double lossScale);

private:
    struct Saved {
        torch::Tensor embedded;
        std::vector<std::pair<torch::Tensor, torch::Tensor>> blocks; // (input leaf, output or undefined)
        torch::Tensor headInput;
        torch::Tensor loss;
    };

    StagedModel& m_model;
    ZeroOptimizer& m_zero;
    StageLayout m_layout;
    bool m_checkpointing;
    bool m_bf16;
    torch::Device m_device;
    std::map<int64_t, Saved> m_saved;
};

} // namespace crowdtrain::engine::parallel
