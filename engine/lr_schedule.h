#pragma once

// Learning-rate schedule: linear warmup, then cosine decay to a floor (as
// nanoGPT's get_lr). A pure function of the step; thread-safe.

#include <cstdint>

namespace crowdtrain::engine {

struct LrSchedule {
    double learningRate = 6e-4;
    double minLr = 6e-5;
    int64_t warmupIters = 2000;
    int64_t lrDecayIters = 600000;
    bool decayLr = true;
};

double learningRateAt(int64_t step, const LrSchedule& schedule);

} // namespace crowdtrain::engine
