#pragma once

// bf16 weights on the device, the fp32 master and 8-bit AdamW moments in
// host RAM (issue 41, item 4; ZeRO-Offload's split, with 8-bit moments):
// what lets GPT-2 1.5B train on a 12 GB card. The device holds the model's
// weights and gradients in bf16 (4 bytes a parameter); host RAM holds the
// float32 master weights (4) and the moments (2, plus 8 bytes a block of
// 256). A step:
//   1. the whole gradient's norm, in float32 on the device (one parameter's
//      float32 copy at a time), and clip_grad_norm_'s coefficient;
//   2. for each parameter: its bf16 gradient to the host (through a pinned
//      buffer on CUDA), widened to float32; the CPU 8-bit kernel
//      (engine/adamw8bit.h) updates its master and moments; the master,
//      rounded to bf16, back to the device weights.
// Host buffers: one parameter's gradient in float32 and one in bf16.
// The flat weights a task writes out and reads in are the master's
// (named()); after changing the master, toDevice() refreshes the weights.

#include "engine/adamw8bit.h"
#include "engine/model_io.h"

#include <torch/torch.h>
#include <unordered_map>
#include <vector>

namespace crowdtrain::engine {

class HostMaster {
public:
    // Copies the model's float32 weights into the master, then turns them
    // into bf16 where they are. `optimizer` lends its groups' rates, betas,
    // decay and eps, and must hold the model's parameters; it keeps no state.
    HostMaster(Gpt& model, torch::optim::AdamW& optimizer);

    // The update of one step (above); returns the gradient's norm before
    // clipping (maxNorm <= 0: no clipping). A non-finite norm changes
    // nothing. Parameters without a gradient are left as they are.
    double step(double maxNorm);

    // The master weights by name, in namedParameters() order: float32, CPU.
    const NamedParameters& named() const { return m_master; }
    // The device weights from the master (bf16), after it changed.
    void toDevice();

    // Host bytes: master, moments and the two staging buffers.
    int64_t hostBytes() const;
    const AdamW8bit& moments() const { return m_adamW; }

private:
    // Parameter j's gradient as float32 in host RAM (a staging buffer).
    torch::Tensor gradientOnHost(const torch::Tensor& grad);
    void copyToDevice(std::size_t j);

    torch::optim::AdamW& m_optimizer;
    NamedParameters m_master;
    std::vector<torch::Tensor> m_deviceWeights; // the model's, in the same order
    std::unordered_map<const void*, std::size_t> m_index; // a weight's TensorImpl -> j
    torch::Tensor m_gradStage; // float32, the largest parameter's size
    torch::Tensor m_bf16Stage; // bf16, pinned when the weights are on a GPU
    AdamW8bit m_adamW;
};

} // namespace crowdtrain::engine
