#pragma once

// Hand-written CPU kernels for the ops where libtorch 1.x's generic CPU
// kernels cost more than the matrix products around them. Each falls back
// to the stock op for anything but a float32 CPU tensor, and each has a
// reference test against that op (tests/tst_model.cpp, tests/tst_trainer.cpp).

#include <algorithm>
#include <cstdint>
#include <torch/torch.h>
#include <vector>

namespace crowdtrain::engine {

// GPT-2's GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))),
// forward and backward in one vectorised pass each (about 5x the stock op).
torch::Tensor geluTanh(const torch::Tensor& x);

} // namespace crowdtrain::engine

namespace crowdtrain::engine {

// The elements of several tensors taken end to end, as one range: calls
// fn(j, offset, count) for the part of tensor j (sizes[j] elements) that
// falls in [begin, end) of the whole. Lets threads split a model's update
// into equal slices whatever its tensors' sizes.
template <typename Fn> void forEachPiece(const std::vector<int64_t>& sizes, int64_t begin, int64_t end, Fn&& fn)
{
    int64_t start = 0;
    for (std::size_t j = 0; j < sizes.size() && start < end; ++j) {
        const int64_t stop = start + sizes[j];
        const int64_t from = std::max(begin, start), to = std::min(end, stop);
        if (from < to)
            fn(j, from - start, to - from);
        start = stop;
    }
}

// dst[i] += src[i]; the arrays must not overlap.
void addInto(float* dst, const float* src, int64_t n);
// The sum of x[i]^2 (float lanes, summed in double at the end).
double sumOfSquares(const float* x, int64_t n);

// One AdamW step of an optimizer with the same update as libtorch's
// AdamW::step() (decoupled weight decay, bias-corrected moments; no
// amsgrad), one fused pass over the elements instead of seven tensor ops
// per parameter. The moments stay in the optimizer's own state, so saving
// and loading it is unchanged. prepare() does the bookkeeping (step counts,
// new moments) on one thread; run() then updates any slice of the
// parameters' elements taken end to end, from any thread, each slice once.
class FusedAdamW {
public:
    // False, with nothing changed, unless every parameter with a gradient
    // (and its gradient) is a contiguous float32 CPU tensor and amsgrad is
    // off. Each gradient is read multiplied by gradScale (a clipping
    // coefficient that was not applied to the gradients themselves).
    bool prepare(torch::optim::AdamW& optimizer, float gradScale = 1.0f);
    int64_t size() const { return m_total; }
    void run(int64_t begin, int64_t end) const;

private:
    struct Scalars {
        float decay; // 1 - lr * weight_decay
        float beta1, beta2;
        float sqrtBiasCorrection2;
        float eps;
        float stepSize; // lr / bias_correction1
        float gradScale;
    };
    struct Item {
        float* param;
        const float* grad;
        float* m;
        float* v;
        Scalars scalars;
    };
    std::vector<Item> m_items;
    std::vector<int64_t> m_sizes;
    int64_t m_total = 0;
};

// A whole step with FusedAdamW on libtorch's intra-op threads; falls back to
// optimizer.step() where FusedAdamW::prepare() refuses.
void fusedAdamWStep(torch::optim::AdamW& optimizer);

} // namespace crowdtrain::engine
