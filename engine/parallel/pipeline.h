#pragma once

// Pipeline parallel (GPipe's stages, PipeDream-Flush's 1F1B order): stage s
// of P runs min(P - s - 1, M) forwards of the step's M micro-batches, then
// alternates one forward and one backward, then drains the backwards.
// Activations go forward and their gradients back by c10d send/recv
// (asynchronous sends, so no ordering of the two directions can deadlock).
// The bubble, the share of the step a stage waits, is (P - 1) / (M + P - 1)
// on paper; the schedule also measures the time each stage spends waiting
// on a receive.

#include "engine/parallel/mesh.h"
#include "engine/parallel/stage_runner.h"

namespace crowdtrain::engine::parallel {

struct PipelineReport {
    double lossSum = 0; // the last stage's micro-batch losses, summed (0 elsewhere)
    double waitMs = 0; // time this stage spent waiting on receives
    double bubbleOnPaper = 0;
};

// xs/ys: the step's micro-batches (every stage draws them; the first uses
// the tokens, the last the targets). hidden: the activation's shape.
PipelineReport runOneForwardOneBackward(StageRunner& runner, Mesh& mesh, const std::vector<torch::Tensor>& xs,
    const std::vector<torch::Tensor>& ys, std::vector<int64_t> hidden, double lossScale);

// Forward only (evaluation, under NoGradGuard); the loss sum on the last stage.
double runForwardOnly(StageRunner& runner, Mesh& mesh, const std::vector<torch::Tensor>& xs,
    const std::vector<torch::Tensor>& ys, std::vector<int64_t> hidden);

} // namespace crowdtrain::engine::parallel
