#pragma once

// The DiLoCo outer optimizer: SGD with Nesterov momentum, PyTorch's
// semantics, the averaged pseudo-gradient playing the gradient:
//   m <- mu * m + avg;  step = avg + mu * m (nesterov) or m;  u = -lr * step.
// It returns the update u instead of applying it, because the coordinator
// quantises u before anyone applies it. Holds one momentum buffer of P
// floats; not thread-safe.

#include "core/result.h"

#include <cstdint>
#include <span>
#include <vector>

namespace crowdtrain::diloco {

struct OuterOptions {
    double lr = 0.7;
    double momentum = 0.9;
    bool nesterov = true;
};

class OuterNesterov {
public:
    OuterNesterov(int64_t n, OuterOptions options = {});

    int64_t size() const { return int64_t(m_momentum.size()); }
    const OuterOptions& options() const { return m_options; }

    // averagedDelta has size() elements.
    std::vector<float> step(const float* averagedDelta);
    void step(const float* averagedDelta, float* update);

    // For checkpoints. "bad_size" unless it has size() elements.
    const std::vector<float>& momentum() const { return m_momentum; }
    Status setMomentum(std::vector<float> momentum);
    // The same, copied into the buffer it has (whose address others keep).
    Status loadMomentum(std::span<const float> momentum);

private:
    OuterOptions m_options;
    std::vector<float> m_momentum;
};

} // namespace crowdtrain::diloco
