#include "engine/hf_gpt2_config.h"

#include "engine/error_codes.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <optional>

namespace crowdtrain::engine {
namespace {

// GPT-2's <|endoftext|>, which GPT2Config uses for bos and eos.
constexpr std::int64_t kEndOfText = 50256;
constexpr double kLayerNormEpsilon = 1e-5;

Error configError(const std::string& source, const std::string& problem)
{
    return Error::make(errc::kBadHfConfig, "'" + source + "': " + problem);
}

// A positive integer field, or GPT2Config's default when it is absent.
Result<std::int64_t> positiveInteger(
    const nlohmann::json& config, const char* key, std::int64_t fallback, const std::string& source)
{
    if (!config.contains(key) || config[key].is_null())
        return fallback;
    const auto& value = config[key];
    if (!value.is_number_unsigned() || value.get<std::uint64_t>() == 0
        || value.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
        return configError(source, std::string(key) + " must be a positive integer, not " + value.dump());
    return static_cast<std::int64_t>(value.get<std::uint64_t>());
}

Result<double> number(const nlohmann::json& config, const char* key, double fallback, const std::string& source)
{
    if (!config.contains(key) || config[key].is_null())
        return fallback;
    if (!config[key].is_number())
        return configError(source, std::string(key) + " must be a number, not " + config[key].dump());
    return config[key].get<double>();
}

// Boolean settings that change the math: absent means GPT2Config's default.
std::optional<Error> requireFlag(
    const nlohmann::json& config, const char* key, bool required, const std::string& source)
{
    if (!config.contains(key) || config[key].is_null())
        return std::nullopt;
    if (!config[key].is_boolean() || config[key].get<bool>() != required)
        return configError(source,
            std::string(key) + " is " + config[key].dump() + "; only " + (required ? "true" : "false")
                + " is supported");
    return std::nullopt;
}

} // namespace

std::string huggingFaceGpt2ConfigJson(const GptConfig& config)
{
    // nlohmann::json keeps keys sorted, as save_pretrained's sort_keys=True.
    nlohmann::json json;
    json["model_type"] = "gpt2";
    json["architectures"] = {"GPT2LMHeadModel"};
    json["vocab_size"] = config.vocabSize;
    json["n_positions"] = config.blockSize;
    json["n_ctx"] = config.blockSize;
    json["n_embd"] = config.nEmbd;
    json["n_layer"] = config.nLayer;
    json["n_head"] = config.nHead;
    json["n_inner"] = nullptr;
    json["activation_function"] = "gelu_new";
    json["layer_norm_epsilon"] = kLayerNormEpsilon;
    json["initializer_range"] = 0.02;
    json["resid_pdrop"] = config.dropout;
    json["embd_pdrop"] = config.dropout;
    json["attn_pdrop"] = config.dropout;
    // A vocabulary without GPT-2's <|endoftext|> (a character-level demo) has
    // no such token; pointing generate() at id 50256 would index out of range.
    if (config.vocabSize > kEndOfText) {
        json["bos_token_id"] = kEndOfText;
        json["eos_token_id"] = kEndOfText;
    } else {
        json["bos_token_id"] = nullptr;
        json["eos_token_id"] = nullptr;
    }
    json["tie_word_embeddings"] = true;
    json["scale_attn_weights"] = true;
    json["scale_attn_by_inverse_layer_idx"] = false;
    json["reorder_and_upcast_attn"] = false;
    json["use_cache"] = true;
    json["torch_dtype"] = "float32";
    return json.dump(2) + "\n";
}

Result<GptConfig> parseHuggingFaceGpt2Config(const std::string& text, const std::string& source)
{
    nlohmann::json json;
    try {
        json = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
        return configError(source, std::string("not valid JSON (") + e.what() + ")");
    }
    if (!json.is_object())
        return configError(source, "not a JSON object");
    if (json.contains("model_type") && json["model_type"] != "gpt2")
        return configError(source, "model_type is " + json["model_type"].dump() + ", not \"gpt2\"");

    // Defaults are GPT2Config's, so a config that transformers accepts with
    // keys missing means the same model here.
    GptConfig config;
    const std::pair<const char*, std::int64_t*> sizes[] = {
        {"vocab_size", &config.vocabSize},
        {"n_positions", &config.blockSize},
        {"n_embd", &config.nEmbd},
        {"n_layer", &config.nLayer},
        {"n_head", &config.nHead},
    };
    const std::int64_t defaults[] = {50257, 1024, 768, 12, 12};
    for (std::size_t i = 0; i < std::size(sizes); ++i) {
        auto value = positiveInteger(json, sizes[i].first, defaults[i], source);
        if (!value)
            return value.error();
        *sizes[i].second = *value;
    }
    auto dropout = number(json, "resid_pdrop", 0.1, source);
    if (!dropout)
        return dropout.error();
    config.dropout = *dropout;

    // Both names are GELU's tanh approximation in transformers.
    const nlohmann::json activation = json.contains("activation_function") ? json["activation_function"] : "gelu_new";
    if (activation != "gelu_new" && activation != "gelu_pytorch_tanh")
        return configError(source, "activation_function " + activation.dump() + " is not supported (only gelu_new)");
    auto epsilon = number(json, "layer_norm_epsilon", kLayerNormEpsilon, source);
    if (!epsilon)
        return epsilon.error();
    if (std::abs(*epsilon - kLayerNormEpsilon) > 1e-12)
        return configError(
            source, "layer_norm_epsilon " + json["layer_norm_epsilon"].dump() + " is not supported (only 1e-05)");
    auto inner = positiveInteger(json, "n_inner", 4 * config.nEmbd, source);
    if (!inner)
        return inner.error();
    if (*inner != 4 * config.nEmbd)
        return configError(source, "n_inner " + std::to_string(*inner) + " is not supported (only 4 * n_embd)");
    for (const auto& [key, required] : {std::pair{"tie_word_embeddings", true}, std::pair{"scale_attn_weights", true},
             std::pair{"scale_attn_by_inverse_layer_idx", false}}) {
        if (auto error = requireFlag(json, key, required, source))
            return *error;
    }
    if (Status valid = validate(config); !valid)
        return configError(source, valid.error().message);
    return config;
}

} // namespace crowdtrain::engine
