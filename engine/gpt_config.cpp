#include "engine/gpt_config.h"

#include "engine/error_codes.h"

#include <array>
#include <utility>

namespace crowdtrain::engine {
namespace {

struct NamedConfig {
    const char* name;
    GptConfig config;
};

// GPT-2's published sizes (vocab 50257, context 1024) and a tiny test model.
const std::array<NamedConfig, 5> kPresets{{
    {"tiny", {.nLayer = 2, .nHead = 2, .nEmbd = 32, .blockSize = 32, .vocabSize = 65, .dropout = 0.0}},
    {"gpt2", {.nLayer = 12, .nHead = 12, .nEmbd = 768, .blockSize = 1024, .vocabSize = 50257, .dropout = 0.0}},
    {"gpt2-medium", {.nLayer = 24, .nHead = 16, .nEmbd = 1024, .blockSize = 1024, .vocabSize = 50257, .dropout = 0.0}},
    {"gpt2-large", {.nLayer = 36, .nHead = 20, .nEmbd = 1280, .blockSize = 1024, .vocabSize = 50257, .dropout = 0.0}},
    {"gpt2-xl", {.nLayer = 48, .nHead = 25, .nEmbd = 1600, .blockSize = 1024, .vocabSize = 50257, .dropout = 0.0}},
}};

} // namespace

Result<GptConfig> gptConfigByName(const std::string& name)
{
    for (const auto& preset : kPresets) {
        if (name == preset.name)
            return preset.config;
    }
    std::string known;
    for (const auto& preset : kPresets)
        known += (known.empty() ? "" : ", ") + std::string(preset.name);
    return Error::make(errc::kUnknownModel, "unknown model config '" + name + "' (known: " + known + ")");
}

std::vector<std::string> gptConfigNames()
{
    std::vector<std::string> names;
    for (const auto& preset : kPresets)
        names.emplace_back(preset.name);
    return names;
}

Status validate(const GptConfig& c)
{
    if (c.nLayer <= 0 || c.nHead <= 0 || c.nEmbd <= 0 || c.blockSize <= 0 || c.vocabSize <= 0)
        return Error::make(errc::kBadConfig, "model sizes must be positive");
    if (c.nEmbd % c.nHead != 0)
        return Error::make(errc::kBadConfig,
            "n_embd (" + std::to_string(c.nEmbd) + ") must be divisible by n_head (" + std::to_string(c.nHead) + ")");
    if (c.vocabSize > 65536)
        return Error::make(errc::kBadConfig, "vocab_size above 65536 does not fit uint16 token shards");
    if (c.dropout < 0.0 || c.dropout >= 1.0)
        return Error::make(errc::kBadConfig, "dropout must be in [0, 1)");
    return Status::success();
}

int64_t parameterCount(const GptConfig& c)
{
    const int64_t d = c.nEmbd;
    const int64_t embeddings = c.vocabSize * d + c.blockSize * d;
    const int64_t layerNorm = 2 * d;
    const int64_t attention = d * 3 * d + 3 * d + d * d + d;
    const int64_t mlp = d * 4 * d + 4 * d + 4 * d * d + d;
    const int64_t block = 2 * layerNorm + attention + mlp;
    return embeddings + c.nLayer * block + layerNorm;
}

} // namespace crowdtrain::engine
