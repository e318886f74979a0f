#pragma once

// Hand-written CPU kernels for the ops where libtorch 1.x's generic CPU
// kernels cost more than the matrix products around them. Each falls back
// to the stock op for anything but a float32 CPU tensor, and each has a
// reference test against that op (tests/tst_model.cpp).

#include <torch/torch.h>

namespace crowdtrain::engine {

// GPT-2's GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))),
// forward and backward in one vectorised pass each (about 5x the stock op).
torch::Tensor geluTanh(const torch::Tensor& x);

} // namespace crowdtrain::engine

namespace crowdtrain::engine {

// One AdamW step of `optimizer` with the same update as libtorch's
// AdamW::step() (decoupled weight decay, bias-corrected moments; no
// amsgrad), one fused pass per parameter instead of seven tensor ops. The
// moments stay in the optimizer's own state, so saving and loading it is
// unchanged. Falls back to optimizer.step() unless every parameter with a
// gradient is a contiguous float32 CPU tensor.
void fusedAdamWStep(torch::optim::AdamW& optimizer);

} // namespace crowdtrain::engine
