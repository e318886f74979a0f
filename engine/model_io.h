#pragma once

// Moving whole models in and out: a model from a Hugging Face GPT-2 folder or
// from a training-state file, and parameter lists by name. Thread-safe for
// distinct models.

#include "core/result.h"
#include "engine/gpt.h"

#include <filesystem>

namespace crowdtrain::engine {

using NamedParameters = std::vector<std::pair<std::string, torch::Tensor>>;

NamedParameters namedParameters(Gpt& model);

// Copies values into the model's parameters of the same names; every
// parameter must be present with its shape, or nothing changes.
Status loadParameters(Gpt& model, const NamedParameters& values);

// A folder holding model.safetensors + config.json (our export or GPT-2's
// own), or a training-state file written by Trainer::saveState.
Result<Gpt> loadModel(const std::filesystem::path& path);

// The model config recorded in a training-state file.
Result<GptConfig> readTrainStateConfig(const std::filesystem::path& file);

} // namespace crowdtrain::engine
