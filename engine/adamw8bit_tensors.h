#pragma once

// AdamW with 8-bit moments on any device (issue 41, item 4): the update of
// engine/adamw8bit.h written with tensor operations, so that it runs where
// the parameters are (CUDA; the CPU too, where the raw-pointer kernel is
// the default). Each parameter's moments are byte codes ([blocks, 256]
// uint8, the parameter's elements then zeros up to a whole block) and one
// float32 scale a block, on the parameter's device. A step dequantises by
// indexing the 256-entry maps, updates in float32 with the same operations
// in the same order as the CPU kernel (so the same results on a CPU:
// tests/tst_trainer_memory), and stores each moment as its nearest map
// entry with the same tie rule as quantise(): the lower entry when x lies
// exactly half-way. Temporaries: at most kChunkElements elements of one
// parameter at a time (about 40 bytes each), never a whole-model copy.

#include "engine/adamw8bit.h"

#include <torch/torch.h>
#include <vector>

namespace crowdtrain::engine {

class AdamW8bitTensors {
public:
    static constexpr int64_t kChunkElements = int64_t(1) << 22;

    // False, with nothing changed, unless every parameter with a gradient is
    // a contiguous float32 tensor with a gradient of the same shape on its
    // device, and amsgrad is off. Each gradient is read multiplied by
    // gradScale.
    bool step(torch::optim::AdamW& optimizer, float gradScale = 1.0f);

    int64_t stateBytes() const;
    int64_t stepCount() const { return m_step; }
    // As AdamW8bit::moment: dequantised, float32 on the CPU, flat.
    torch::Tensor moment(std::size_t index, bool second) const;

private:
    struct Moments {
        torch::Tensor m, v; // [blocks, 256] uint8: the maps' indices
        torch::Tensor mScale, vScale; // [blocks] float32
        int64_t numel = 0;
    };
    struct Scalars {
        float decay, stepSize, sqrtBiasCorrection2, eps, beta1, beta2, gradScale;
    };
    void updateChunk(
        const torch::Tensor& param, const torch::Tensor& grad, Moments& s, int64_t firstBlock, const Scalars& k);
    const torch::Tensor& map(bool second, const torch::Device& device);

    std::vector<Moments> m_moments; // one per parameter, in the groups' order
    torch::Tensor m_signedMap, m_unsignedMap; // on the parameters' device
    int64_t m_step = 0;
};

} // namespace crowdtrain::engine
