#include "engine/checkpointing.h"

#include "engine/autocast_scope.h"

#include <vector>

namespace crowdtrain::engine {

torch::Tensor checkpointedLossBackward(
    Gpt& model, const torch::Tensor& x, const torch::Tensor& y, double lossScale, bool bf16Autocast)
{
    // Forward: the embeddings with their (small) graph, then each block
    // without one; a block's input is kept as a leaf that will collect its
    // gradient.
    torch::Tensor embedded;
    {
        AutocastScope autocast(bf16Autocast);
        embedded = model->embed(x);
    }
    const int64_t blocks = model->blockCount();
    std::vector<torch::Tensor> inputs;
    inputs.reserve(std::size_t(blocks));
    torch::Tensor hidden = embedded.detach();
    for (int64_t i = 0; i < blocks; ++i) {
        inputs.push_back(hidden.requires_grad_(true));
        torch::NoGradGuard noGrad;
        AutocastScope autocast(bf16Autocast);
        hidden = model->block(i, inputs.back());
    }
    hidden.requires_grad_(true);
    torch::Tensor loss;
    {
        AutocastScope autocast(bf16Autocast);
        loss = model->headLoss(hidden, y);
    }
    (loss * lossScale).backward();
    torch::Tensor grad = hidden.grad();
    hidden = torch::Tensor();

    // Backward: each block recomputed with its graph, differentiated, and
    // its graph and input freed before the next.
    for (int64_t i = blocks - 1; i >= 0; --i) {
        torch::Tensor out;
        {
            AutocastScope autocast(bf16Autocast);
            out = model->block(i, inputs[std::size_t(i)]);
        }
        torch::autograd::backward({out}, {grad});
        grad = inputs[std::size_t(i)].grad();
        inputs[std::size_t(i)] = torch::Tensor();
    }
    torch::autograd::backward({embedded}, {grad});
    return loss.detach();
}

} // namespace crowdtrain::engine
