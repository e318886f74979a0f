#pragma once

// Hugging Face GPT-2 checkpoints: the folder GPT2LMHeadModel.save_pretrained
// writes (model.safetensors + config.json), to and from our model's tensors.
//
// Our names are HF's without the "transformer." prefix ("wte.weight",
// "h.0.attn.c_attn.weight", ...), with nn.Linear layouts [out, in]. HF's GPT-2
// uses Conv1D, whose weights are stored [in, out], so c_attn, attn.c_proj,
// c_fc and mlp.c_proj weights are transposed on the way out and back in. The
// LM head is tied to wte.weight and not stored, as save_pretrained does.
//
// Free functions without shared state: safe to call from any thread, on
// different folders.

#include "core/result.h"
#include "engine/gpt_config.h"
#include "engine/safetensors.h"

#include <torch/types.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace crowdtrain::engine {

struct HfGpt2Weights {
    GptConfig config;
    NamedTensors parameters; // our names and layouts, float32, in gptParameterShapes() order
};

// Every parameter of our GPT-2 for `config`, by our name, with its nn.Linear
// shape, in model order (embeddings, blocks, final layer norm).
std::vector<std::pair<std::string, std::vector<std::int64_t>>> gptParameterShapes(const GptConfig& config);

// Writes dir/model.safetensors (HF names with "transformer.", Conv1D layouts,
// F32, metadata {"format": "pt"} plus `extraMetadata`) and dir/config.json.
// A new folder is built under a temporary name and renamed into place; in an
// existing folder each file is replaced atomically. `ourNamedParameters` must
// hold exactly gptParameterShapes(config) (a "lm_head.weight" equal to
// wte.weight is accepted and skipped), on any device, any floating dtype.
Status exportHuggingFaceGpt2(const std::filesystem::path& dir, const GptConfig& config,
    const NamedTensors& ourNamedParameters, const std::map<std::string, std::string>& extraMetadata = {});

// Reads such a folder (or one from the Hub: names with or without the
// "transformer." prefix, attn.bias/attn.masked_bias buffers, a tied
// lm_head.weight, F16/BF16/F64 data, a sharded model.safetensors.index.json)
// back into our names and layouts. Safetensors only: pytorch_model.bin is
// refused with an error saying so. Every expected tensor must be present
// with its shape; unknown tensors and config values our model cannot
// reproduce (another activation, layer-norm epsilon, untied head) are errors.
Result<HfGpt2Weights> importHuggingFaceGpt2(const std::filesystem::path& dir);

} // namespace crowdtrain::engine
