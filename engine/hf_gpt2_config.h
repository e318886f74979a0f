#pragma once

// Hugging Face GPT-2 config.json <-> GptConfig. Only the values that decide
// the model's math are read back; everything else GPT2Config knows keeps its
// default, as transformers does. Pure functions: thread-safe.

#include "core/result.h"
#include "engine/gpt_config.h"

#include <string>

namespace crowdtrain::engine {

// The config.json GPT2LMHeadModel.from_pretrained needs for `config`, pretty
// printed with sorted keys like save_pretrained writes it.
std::string huggingFaceGpt2ConfigJson(const GptConfig& config);

// Parses config.json text. Missing sizes take GPT2Config's defaults; settings
// our model cannot reproduce (model_type other than gpt2, an activation other
// than the tanh GELU, layer_norm_epsilon other than 1e-5, n_inner other than
// 4 * n_embd, untied embeddings, per-layer attention scaling) are errors.
// `source` names the file in error messages.
Result<GptConfig> parseHuggingFaceGpt2Config(const std::string& json, const std::string& source);

} // namespace crowdtrain::engine
