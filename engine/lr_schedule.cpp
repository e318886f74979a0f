#include "engine/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace crowdtrain::engine {

double learningRateAt(int64_t step, const LrSchedule& s)
{
    if (!s.decayLr)
        return s.learningRate;
    if (step < s.warmupIters)
        return s.learningRate * double(step + 1) / double(s.warmupIters + 1);
    if (step > s.lrDecayIters)
        return s.minLr;
    const int64_t span = std::max<int64_t>(1, s.lrDecayIters - s.warmupIters);
    const double ratio = std::clamp(double(step - s.warmupIters) / double(span), 0.0, 1.0);
    const double coefficient = 0.5 * (1.0 + std::cos(std::numbers::pi * ratio));
    return s.minLr + coefficient * (s.learningRate - s.minLr);
}

} // namespace crowdtrain::engine
