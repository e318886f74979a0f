#pragma once

// AdamW with 8-bit moments (issue 41, item 4), as bitsandbytes' 8-bit
// optimizers keep them: each parameter's two moments are cut into blocks of
// kMomentBlock elements; a block stores one float32 scale (its largest
// magnitude) and one byte per element, the index of the nearest value in a
// fixed non-linear map of [-1, 1] (the first moment, signed) or [0, 1] (the
// second, unsigned). The maps give each decade below the block's maximum
// half the values of the decade above (the signed map: 64 values in
// [0.1, 1], 32 in [0.01, 0.1], ... 1 in [1e-7, 1e-6]; the unsigned map
// twice as many), so the error is relative to each element's own size
// rather than to the block's maximum. A step dequantises a block, updates
// it in float32 exactly as libtorch's AdamW does (decoupled weight decay,
// bias correction, no amsgrad), takes the parameter's step from the
// float32 moments and stores them quantised again: 2 bytes a parameter
// (plus 8 bytes a block) instead of 8.
//
// CPU float32 parameters only (the raw-pointer kernel); the moments live
// here, not in the libtorch optimizer, which only lends its groups' rates,
// betas, decay and eps. prepare() on one thread, then run() over any slices
// of the blocks taken end to end, each slice once, from any thread. Or one
// parameter at a time (the host master, engine/host_master.h): beginStep(),
// then update() for each parameter with a gradient. A device's parameters
// take the same update from tensor operations (engine/adamw8bit_tensors.h).

#include <array>
#include <cstdint>
#include <torch/torch.h>
#include <vector>

namespace crowdtrain::engine {

inline constexpr int64_t kMomentBlock = 256;

// The signed and unsigned maps, ascending; quantise() gives the nearest
// entry's index (ties to the lower; below the first entry or NaN: 0; above
// the last: 255), dequantise the value. quantiseReference() is the same
// function as a plain std::lower_bound, kept to test quantise() against.
const std::array<float, 256>& signedMomentMap();
const std::array<float, 256>& unsignedMomentMap();
uint8_t quantise(const std::array<float, 256>& map, float x);
uint8_t quantiseReference(const std::array<float, 256>& map, float x);

class AdamW8bit {
public:
    // False, with nothing changed, unless every parameter with a gradient
    // (and its gradient) is a contiguous float32 CPU tensor and amsgrad is
    // off. Each gradient is read multiplied by gradScale.
    bool prepare(torch::optim::AdamW& optimizer, float gradScale = 1.0f);
    int64_t blocks() const { return m_totalBlocks; }
    void run(int64_t beginBlock, int64_t endBlock);
    // A whole step on the calling thread's intra-op pool.
    bool step(torch::optim::AdamW& optimizer, float gradScale = 1.0f);

    // One parameter at a time: beginStep(count) once a step (count: the
    // parameters the moments are kept for, each with its index in
    // [0, count)), then update() for each parameter with a gradient, on the
    // calling thread's intra-op pool. False, with nothing changed, when
    // count differs from an earlier step's.
    bool beginStep(std::size_t count);
    void update(std::size_t index, float* param, const float* grad, int64_t numel,
        const torch::optim::AdamWOptions& options, float gradScale);

    // Bytes the moments take (codes and scales).
    int64_t stateBytes() const;
    int64_t stepCount() const { return m_step; }
    // Parameter `index`'s first (or second) moment as stored, dequantised:
    // float32 on the CPU, flat; empty before its first update.
    torch::Tensor moment(std::size_t index, bool second) const;

private:
    struct Moments {
        std::vector<int8_t> m;
        std::vector<uint8_t> v;
        std::vector<float> mScale, vScale;
    };
    struct Item {
        float* param;
        const float* grad;
        Moments* moments;
        int64_t numel;
        float decay, stepSize, sqrtBiasCorrection2, eps, beta1, beta2;
    };
    void runBlock(const Item& item, int64_t block) const;
    // The item of a parameter's step (its moments zero on its first).
    Item makeItem(Moments& moments, float* param, const float* grad, int64_t numel,
        const torch::optim::AdamWOptions& options) const;

    std::vector<Moments> m_moments; // one per parameter, in the groups' order
    std::vector<Item> m_items;
    std::vector<int64_t> m_blockCounts;
    int64_t m_totalBlocks = 0;
    int64_t m_step = 0;
    float m_gradScale = 1.0f;
};

} // namespace crowdtrain::engine
