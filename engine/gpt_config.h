#pragma once

// The shape of a GPT-2 model: named presets (GPT-2's four sizes and a tiny
// one for tests) or any custom size. Plain data; thread-safe to copy.

#include "core/result.h"

#include <cstdint>
#include <string>
#include <vector>

namespace crowdtrain::engine {

struct GptConfig {
    int64_t nLayer = 12;
    int64_t nHead = 12;
    int64_t nEmbd = 768;
    int64_t blockSize = 1024;
    int64_t vocabSize = 50257;
    double dropout = 0.0;

    bool operator==(const GptConfig&) const = default;
};

// "tiny", "gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl".
Result<GptConfig> gptConfigByName(const std::string& name);
std::vector<std::string> gptConfigNames();

// Checks the shape is buildable (positive sizes, n_embd divisible by n_head).
Status validate(const GptConfig& config);

// Number of trainable parameters with the LM head tied to the token
// embedding, as GPT-2 counts them (124,439,808 for gpt2).
int64_t parameterCount(const GptConfig& config);

} // namespace crowdtrain::engine
