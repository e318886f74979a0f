#pragma once

// Activation checkpointing per transformer block on one device (issue 41):
// the forward pass keeps only each block's input (B x T x C), not the
// block's intermediate activations; the backward pass runs block by block
// from the last, recomputing each block's forward with its graph just before
// differentiating it. Memory: every block's input plus one block's
// activations at a time, plus the head's logits, instead of every block's
// activations. Cost: one more forward pass of the blocks.
// The same scheme as engine/parallel/stage_runner.cpp (which interleaves
// ZeRO's gathers with it); this one drives a whole engine::Gpt.
// Dropout must be 0: a recomputed block must draw what the first pass drew.

#include "engine/gpt.h"

namespace crowdtrain::engine {

// The loss of a micro-batch (x, y: [B, T] token ids) and its gradients,
// accumulated into the model's parameters as (loss * lossScale).backward()
// after model->loss(x, y) would. bf16: autocast on CUDA for the forward
// passes (first and recomputed). Returns the loss before scaling, a 0-dim
// tensor on the device (not read: reading would wait for the device).
torch::Tensor checkpointedLossBackward(
    Gpt& model, const torch::Tensor& x, const torch::Tensor& y, double lossScale, bool bf16Autocast);

} // namespace crowdtrain::engine
