#pragma once

// Shared by the Hugging Face GPT-2 tests: a small config, a model with
// weights far from its init, and helpers to inspect exported folders.

#include "engine/gpt.h"
#include "engine/safetensors.h"

#include <QByteArray>
#include <QJsonDocument>
#include <QJsonObject>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace crowdtrain::engine::testing {

inline GptConfig smallConfig()
{
    GptConfig c;
    c.nLayer = 2;
    c.nHead = 4;
    c.nEmbd = 32;
    c.blockSize = 16;
    c.vocabSize = 65;
    c.dropout = 0.1;
    return c;
}

// HF's Conv1D weights, listed here independently of the engine's mapping.
inline bool isConv1D(const std::string& name)
{
    for (const char* suffix : {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight"})
        if (name.ends_with(suffix))
            return true;
    return false;
}

// Weights far from GPT-2's init (non-zero biases, uneven layer-norm gains),
// so that a transposed, swapped or dropped tensor changes the logits.
inline Gpt randomModel(const GptConfig& config)
{
    Gpt model(config);
    torch::NoGradGuard noGrad;
    for (auto& item : model->named_parameters()) {
        const bool gain = item.key().find("ln_") != std::string::npos && item.key().ends_with(".weight");
        item.value().normal_(gain ? 1.0 : 0.0, 0.3);
    }
    model->eval();
    return model;
}

inline NamedTensors parametersOf(const Gpt& model)
{
    NamedTensors out;
    for (const auto& item : model->named_parameters())
        out.emplace_back(item.key(), item.value());
    return out;
}

inline QJsonObject readJson(const std::filesystem::path& file)
{
    std::ifstream in(file);
    const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    return QJsonDocument::fromJson(QByteArray::fromStdString(text)).object();
}

} // namespace crowdtrain::engine::testing
