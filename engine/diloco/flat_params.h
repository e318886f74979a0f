#pragma once

// The model as one flat fp32 vector (the flat vector of docs/protocol.md,
// §7, and the "join" manifest of §4): the engine's parameters in
// namedParameters() order, each row-major, concatenated. The manifest lists
// (name, shape, offset) so that two sides can check they build the same
// model. Thread-safe for distinct models.

#include "core/result.h"
#include "engine/diloco/manifest.h"
#include "engine/gpt.h"
#include "engine/model_io.h"

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace crowdtrain::diloco {

Manifest manifestOf(engine::Gpt& model);

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
// The parameters of a CPU float32 model become views over `flat`, no copy
// (the model's own weights are freed): for reading only (evaluation and
// sampling under no_grad), while `flat` lives and keeps its address.
// "bad_size" unless n equals the parameter count; nothing changes then.
Status borrow(engine::Gpt& model, const float* flat, int64_t n);

// The same from a file of the flat vector (P float32, little-endian), read
// parameter by parameter straight into a CPU float32 model (other models
// through one parameter's buffer): no second copy of the weights. Errors:
// "bad_size" unless the file holds exactly P floats (nothing changes then);
// "io_error" (a read failed: the model may then be partly overwritten).
Status assignFromFile(engine::Gpt& model, const std::filesystem::path& file);

// Writes the flat vector to `file` (atomically), parameter by parameter,
// without a whole-vector copy. Errors: "non_finite" when a weight is NaN or
// infinite (no file is written then), "io_error".
Status writeFlatFile(engine::Gpt& model, const std::filesystem::path& file);

// The same over named tensors in the flat vector's order: a trainer's fp32
// master weights (engine/host_master.h) rather than its bf16 device copy.
std::vector<float> flatten(const engine::NamedParameters& params);
Status assign(const engine::NamedParameters& params, const float* flat, int64_t n);
Status assignFromFile(const engine::NamedParameters& params, const std::filesystem::path& file);
Status writeFlatFile(const engine::NamedParameters& params, const std::filesystem::path& file);

} // namespace crowdtrain::diloco
