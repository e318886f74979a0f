#include "engine/diloco/manifest.h"

#include <cstdio>
#include <string_view>

namespace crowdtrain::diloco {

Manifest manifestOf(const engine::GptConfig& config)
{
    Manifest manifest;
    auto add = [&](std::string name, std::vector<int64_t> shape) {
        int64_t numel = 1;
        for (int64_t d : shape)
            numel *= d;
        manifest.entries.push_back({std::move(name), std::move(shape), manifest.totalElements, numel});
        manifest.totalElements += numel;
    };
    const int64_t e = config.nEmbd;
    auto linear = [&](const std::string& prefix, int64_t in, int64_t out) {
        add(prefix + ".weight", {out, in});
        add(prefix + ".bias", {out});
    };
    auto layerNorm = [&](const std::string& prefix) {
        add(prefix + ".weight", {e});
        add(prefix + ".bias", {e});
    };
    add("wte.weight", {config.vocabSize, e});
    add("wpe.weight", {config.blockSize, e});
    for (int64_t i = 0; i < config.nLayer; ++i) {
        const std::string block = "h." + std::to_string(i);
        layerNorm(block + ".ln_1");
        linear(block + ".attn.c_attn", e, 3 * e);
        linear(block + ".attn.c_proj", e, e);
        layerNorm(block + ".ln_2");
        linear(block + ".mlp.c_fc", e, 4 * e);
        linear(block + ".mlp.c_proj", 4 * e, e);
    }
    layerNorm("ln_f");
    return manifest;
}

bool sameLayout(const Manifest& a, const Manifest& b)
{
    return a.totalElements == b.totalElements && a.entries == b.entries;
}

std::string manifestFingerprint(const Manifest& manifest)
{
    uint64_t hash = 0xcbf29ce484222325ull;
    auto mix = [&hash](std::string_view text) {
        for (unsigned char c : text) {
            hash ^= c;
            hash *= 0x100000001b3ull;
        }
    };
    for (const ManifestEntry& entry : manifest.entries) {
        mix(entry.name);
        mix(":");
        for (std::size_t i = 0; i < entry.shape.size(); ++i) {
            if (i > 0)
                mix(",");
            mix(std::to_string(entry.shape[i]));
        }
        mix(";");
    }
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash));
    return hex;
}

std::vector<float> pseudoGradient(const float* global, const float* local, int64_t n)
{
    std::vector<float> delta(static_cast<std::size_t>(std::max<int64_t>(n, 0)));
    for (int64_t i = 0; i < n; ++i)
        delta[static_cast<std::size_t>(i)] = global[i] - local[i];
    return delta;
}

} // namespace crowdtrain::diloco
