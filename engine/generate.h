#pragma once

// Text generation from a trained model: autoregressive sampling with
// temperature and top-k, streaming each token as it is chosen. Uses the
// model from the calling thread only.

#include "engine/gpt.h"

#include <functional>

namespace crowdtrain::engine {

struct SampleOptions {
    int64_t maxNewTokens = 200;
    double temperature = 0.8; // 0 picks the most likely token (greedy)
    int64_t topK = 200; // 0 keeps the whole vocabulary
    uint64_t seed = 1337;
};

// Appends up to maxNewTokens to `prompt` (which must not be empty) and returns
// the new tokens. `onToken` sees each one; returning false stops early. The
// context is cropped to the model's block size.
std::vector<int64_t> generate(Gpt& model, const std::vector<int64_t>& prompt, const SampleOptions& options,
    const std::function<bool(int64_t)>& onToken = {});

} // namespace crowdtrain::engine
