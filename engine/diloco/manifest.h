#pragma once

// The model's layout as the wire sees it (docs/protocol.md, §4 "join" and §7
// "the flat vector"): the parameters in the engine's namedParameters()
// order, each row-major, concatenated into one fp32 vector, listed as
// (name, shape, offset). Plain C++, no libtorch: the daemon checks a
// coordinator's manifest and sizes its buffers from the model's config alone,
// while the training core (which builds the model) uses flat_params.h.
// Thread-safe (pure functions).

#include "engine/gpt_config.h"

#include <cstdint>
#include <string>
#include <vector>

namespace crowdtrain::diloco {

struct ManifestEntry {
    std::string name;
    std::vector<int64_t> shape;
    int64_t offset = 0; // first element in the flat vector
    int64_t numel = 0;

    bool operator==(const ManifestEntry&) const = default;
};

struct Manifest {
    std::vector<ManifestEntry> entries;
    int64_t totalElements = 0;
};

// The manifest of engine::Gpt(config) without building it: GPT-2's tensors
// (wte, wpe, per block ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc,
// mlp.c_proj, then ln_f; Linear weights as [out, in]). tst_core checks it
// equals manifestOf(Gpt) for several shapes.
Manifest manifestOf(const engine::GptConfig& config);

// Same names, shapes and offsets in the same order.
bool sameLayout(const Manifest& a, const Manifest& b);

// 16 lower-case hex digits: FNV-1a 64 over "name:d0,d1,...;" for each entry
// in order. Stable across machines and versions; not a security hash.
std::string manifestFingerprint(const Manifest& manifest);

// The DiLoCo pseudo-gradient: global - local, element by element.
std::vector<float> pseudoGradient(const float* global, const float* local, int64_t n);

} // namespace crowdtrain::diloco
