#pragma once

// The model as one flat fp32 vector (the flat vector of docs/protocol.md,
// §7, and the "join" manifest of §4): the engine's parameters in
// namedParameters() order, each row-major, concatenated. The manifest lists
// (name, shape, offset) so that two sides can check they build the same
// model. Thread-safe for distinct models.

#include "core/result.h"
#include "engine/gpt.h"

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

Manifest manifestOf(engine::Gpt& model);

// Same names, shapes and offsets in the same order.
bool sameLayout(const Manifest& a, const Manifest& b);

// 16 lower-case hex digits: FNV-1a 64 over "name:d0,d1,...;" for each entry
// in order. Stable across machines and versions; not a security hash.
std::string manifestFingerprint(const Manifest& manifest);

// The model a project starts from when its spec gives init.seed: libtorch's
// generator seeded with `seed`, then the engine's initialisation, on the
// CPU. The coordinator's theta_0 and a volunteer's rebuilt copy come from
// here, so that a volunteer joining at version 0 need not download it (it
// checks the SHA-256 the coordinator announces: another libtorch may draw
// other numbers). Sets libtorch's global seed: call it where no other thread
// draws from the default generator.
engine::Gpt seededModel(const engine::GptConfig& config, uint64_t seed);

// The parameters as fp32 on the CPU, copied from whatever device they are on.
std::vector<float> flatten(engine::Gpt& model);

// Copies a flat vector into the model's parameters (any device and dtype).
// "bad_size" unless n equals the parameter count; nothing changes then.
Status assign(engine::Gpt& model, const float* flat, int64_t n);

// The DiLoCo pseudo-gradient: global - local, element by element.
std::vector<float> pseudoGradient(const float* global, const float* local, int64_t n);

} // namespace crowdtrain::diloco
