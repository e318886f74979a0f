#include "engine/hf_gpt2.h"

#include "core/file_io.h"
#include "engine/error_codes.h"
#include "engine/hf_gpt2_config.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <optional>
#include <set>
#include <sstream>
#include <system_error>

namespace crowdtrain::engine {
namespace {

const char* const kWeightsFile = "model.safetensors";
const char* const kShardIndexFile = "model.safetensors.index.json";
const char* const kConfigFile = "config.json";
const std::string kPrefix = "transformer.";

// HF's GPT-2 builds these four from Conv1D, which stores [in, out].
bool isConv1DWeight(const std::string& ourName)
{
    return ourName.ends_with(".attn.c_attn.weight") || ourName.ends_with(".attn.c_proj.weight")
        || ourName.ends_with(".mlp.c_fc.weight") || ourName.ends_with(".mlp.c_proj.weight");
}

std::vector<std::int64_t> huggingFaceShape(const std::string& ourName, std::vector<std::int64_t> shape)
{
    if (isConv1DWeight(ourName))
        std::reverse(shape.begin(), shape.end());
    return shape;
}

std::string shapeString(c10::IntArrayRef shape)
{
    std::ostringstream out;
    out << shape;
    return out.str();
}

Error exportError(const std::filesystem::path& dir, const std::string& problem)
{
    return Error::make(errc::kBadExport, "cannot export GPT-2 to '" + dir.string() + "': " + problem);
}

Error importError(const std::filesystem::path& dir, const std::string& problem)
{
    return Error::make(errc::kBadHfCheckpoint, "cannot import GPT-2 from '" + dir.string() + "': " + problem);
}

// The export's tensors by HF name, checked against the config.
Result<NamedTensors> toHuggingFace(
    const std::filesystem::path& dir, const GptConfig& config, const NamedTensors& ourNamedParameters)
{
    std::map<std::string, torch::Tensor> given;
    for (const auto& [name, tensor] : ourNamedParameters) {
        if (!given.emplace(name, tensor).second)
            return exportError(dir, "parameter '" + name + "' is given twice");
    }
    NamedTensors hf;
    for (const auto& [name, shape] : gptParameterShapes(config)) {
        auto it = given.find(name);
        if (it == given.end())
            return exportError(dir, "parameter '" + name + "' is missing");
        const torch::Tensor& tensor = it->second;
        if (!tensor.defined() || !tensor.is_floating_point())
            return exportError(dir, "parameter '" + name + "' is not a floating-point tensor");
        if (tensor.sizes() != c10::IntArrayRef(shape))
            return exportError(dir,
                "parameter '" + name + "' has shape " + shapeString(tensor.sizes()) + ", the config needs "
                    + shapeString(shape));
        torch::Tensor out = tensor.detach().to(torch::kCPU, torch::kFloat32);
        if (isConv1DWeight(name))
            out = out.t();
        hf.emplace_back(kPrefix + name, out.contiguous());
        given.erase(it);
    }
    // A module that registers the tied head under its own name lists it too.
    if (auto head = given.find("lm_head.weight"); head != given.end()) {
        const torch::Tensor& wte = hf.front().second;
        const torch::Tensor headData = head->second.detach().to(torch::kCPU, torch::kFloat32);
        if (!headData.sizes().equals(wte.sizes()) || !torch::equal(headData, wte))
            return exportError(dir, "lm_head.weight differs from wte.weight, but GPT-2 ties them");
        given.erase(head);
    }
    if (!given.empty())
        return exportError(dir, "parameter '" + given.begin()->first + "' is not part of GPT-2");
    return hf;
}

Status writeBoth(const std::filesystem::path& dir, const NamedTensors& tensors,
    const std::map<std::string, std::string>& metadata, const std::string& configJson)
{
    if (Status written = writeSafetensors(dir / kWeightsFile, tensors, metadata); !written)
        return written;
    return core::writeFileAtomic(dir / kConfigFile, configJson);
}

Status exportChecked(const std::filesystem::path& requested, const GptConfig& config,
    const NamedTensors& ourNamedParameters, const std::map<std::string, std::string>& extraMetadata)
{
    const std::filesystem::path dir = requested.has_filename() ? requested : requested.parent_path();
    if (Status valid = validate(config); !valid)
        return exportError(dir, valid.error().message);
    auto tensors = toHuggingFace(dir, config, ourNamedParameters);
    if (!tensors)
        return tensors.error();
    std::map<std::string, std::string> metadata = extraMetadata;
    // transformers refuses safetensors files without format "pt".
    if (auto format = metadata.find("format"); format != metadata.end() && format->second != "pt")
        return exportError(dir, "metadata 'format' must be \"pt\", not \"" + format->second + "\"");
    metadata["format"] = "pt";
    const std::string configJson = huggingFaceGpt2ConfigJson(config);

    std::error_code error;
    if (std::filesystem::exists(dir, error)) {
        if (!std::filesystem::is_directory(dir, error))
            return exportError(dir, "it exists and is not a folder");
        // Replacing the folder would drop files others keep there (a
        // tokenizer); each file is still replaced atomically, weights first.
        return writeBoth(dir, *tensors, metadata, configJson);
    }
    if (dir.has_parent_path()) {
        std::filesystem::create_directories(dir.parent_path(), error);
        if (error)
            return exportError(dir, "cannot create its parent folder: " + error.message());
    }
    // A new export appears whole or not at all: built aside, then renamed.
    const std::filesystem::path temporary = core::temporarySibling(dir);
    if (!std::filesystem::create_directory(temporary, error))
        return exportError(dir, "cannot create '" + temporary.string() + "': " + error.message());
    Status written = writeBoth(temporary, *tensors, metadata, configJson);
    if (written) {
        std::filesystem::rename(temporary, dir, error);
        if (error)
            written = exportError(dir, "cannot rename '" + temporary.string() + "' into place: " + error.message());
    }
    if (!written) {
        std::filesystem::remove_all(temporary, error);
        return written;
    }
    return core::syncFolder(dir.parent_path());
}

// The safetensors files of a checkpoint: one, or the shards an index names.
Result<std::vector<std::filesystem::path>> weightFiles(const std::filesystem::path& dir)
{
    std::error_code error;
    if (std::filesystem::exists(dir / kWeightsFile, error))
        return std::vector{dir / kWeightsFile};
    if (!std::filesystem::exists(dir / kShardIndexFile, error)) {
        const bool pickle = std::filesystem::exists(dir / "pytorch_model.bin", error);
        return importError(dir,
            std::string("there is no ") + kWeightsFile + (pickle ? " (only pytorch_model.bin, which is" : " (")
                + " not read: only safetensors checkpoints are supported)");
    }
    auto indexText = core::readFile(dir / kShardIndexFile);
    if (!indexText)
        return importError(dir, indexText.error().message);
    const nlohmann::json index = nlohmann::json::parse(*indexText, nullptr, false);
    if (index.is_discarded() || !index.contains("weight_map") || !index["weight_map"].is_object())
        return importError(dir, std::string(kShardIndexFile) + " has no weight_map object");
    std::set<std::string> shards;
    for (const auto& [name, shard] : index["weight_map"].items()) {
        const std::string file = shard.is_string() ? shard.get<std::string>() : std::string();
        // Shards live in the folder itself; a path here points elsewhere.
        if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..")
            return importError(
                dir, std::string(kShardIndexFile) + " names shard " + shard.dump() + " for '" + name + "'");
        shards.insert(file);
    }
    std::vector<std::filesystem::path> files;
    for (const auto& shard : shards)
        files.push_back(dir / shard);
    return files;
}

Result<HfGpt2Weights> importChecked(const std::filesystem::path& dir)
{
    std::error_code error;
    if (!std::filesystem::is_directory(dir, error))
        return importError(dir, "it is not a folder");
    auto configText = core::readFile(dir / kConfigFile);
    if (!configText)
        return importError(dir, configText.error().message);
    auto config = parseHuggingFaceGpt2Config(*configText, (dir / kConfigFile).string());
    if (!config)
        return config.error();

    auto files = weightFiles(dir);
    if (!files)
        return files.error();
    std::map<std::string, torch::Tensor> found; // our names
    std::optional<torch::Tensor> head;
    for (const auto& file : *files) {
        auto read = readSafetensors(file);
        if (!read)
            return read.error();
        for (auto& [stored, tensor] : read->tensors) {
            const std::string name = stored.starts_with(kPrefix) ? stored.substr(kPrefix.size()) : stored;
            // Causal-mask buffers that older transformers saved with the weights.
            if (name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias"))
                continue;
            if (name == "lm_head.weight") {
                head = tensor;
                continue;
            }
            if (!found.emplace(name, tensor).second)
                return importError(dir, "tensor '" + name + "' appears twice (with and without \"transformer.\"?)");
        }
    }

    HfGpt2Weights weights{*config, {}};
    for (const auto& [name, shape] : gptParameterShapes(*config)) {
        auto it = found.find(name);
        if (it == found.end())
            return importError(dir, "tensor 'transformer." + name + "' is missing");
        const torch::Tensor& tensor = it->second;
        const std::vector<std::int64_t> expected = huggingFaceShape(name, shape);
        if (!tensor.is_floating_point())
            return importError(dir, "tensor '" + it->first + "' is not floating point");
        if (tensor.sizes() != c10::IntArrayRef(expected))
            return importError(dir,
                "tensor '" + name + "' has shape " + shapeString(tensor.sizes()) + ", but config.json implies "
                    + shapeString(expected));
        torch::Tensor ours = tensor.to(torch::kFloat32);
        if (isConv1DWeight(name))
            ours = ours.t();
        weights.parameters.emplace_back(name, ours.contiguous());
        found.erase(it);
    }
    if (!found.empty())
        return importError(dir, "tensor '" + found.begin()->first + "' is not part of GPT-2");
    if (head) {
        const torch::Tensor& wte = weights.parameters.front().second;
        if (!head->sizes().equals(wte.sizes()) || !torch::equal(head->to(torch::kFloat32), wte))
            return importError(dir, "lm_head.weight differs from wte.weight; only a tied LM head is supported");
    }
    return weights;
}

} // namespace

std::vector<std::pair<std::string, std::vector<std::int64_t>>> gptParameterShapes(const GptConfig& config)
{
    const std::int64_t d = config.nEmbd;
    std::vector<std::pair<std::string, std::vector<std::int64_t>>> shapes{
        {"wte.weight", {config.vocabSize, d}},
        {"wpe.weight", {config.blockSize, d}},
    };
    for (std::int64_t i = 0; i < config.nLayer; ++i) {
        const std::string block = "h." + std::to_string(i) + ".";
        shapes.push_back({block + "ln_1.weight", {d}});
        shapes.push_back({block + "ln_1.bias", {d}});
        shapes.push_back({block + "attn.c_attn.weight", {3 * d, d}});
        shapes.push_back({block + "attn.c_attn.bias", {3 * d}});
        shapes.push_back({block + "attn.c_proj.weight", {d, d}});
        shapes.push_back({block + "attn.c_proj.bias", {d}});
        shapes.push_back({block + "ln_2.weight", {d}});
        shapes.push_back({block + "ln_2.bias", {d}});
        shapes.push_back({block + "mlp.c_fc.weight", {4 * d, d}});
        shapes.push_back({block + "mlp.c_fc.bias", {4 * d}});
        shapes.push_back({block + "mlp.c_proj.weight", {d, 4 * d}});
        shapes.push_back({block + "mlp.c_proj.bias", {d}});
    }
    shapes.push_back({"ln_f.weight", {d}});
    shapes.push_back({"ln_f.bias", {d}});
    return shapes;
}

Status exportHuggingFaceGpt2(const std::filesystem::path& dir, const GptConfig& config,
    const NamedTensors& ourNamedParameters, const std::map<std::string, std::string>& extraMetadata)
{
    try {
        return exportChecked(dir, config, ourNamedParameters, extraMetadata);
    } catch (const std::exception& e) {
        // c10::Error (device copies) and std::filesystem_error end up here.
        return exportError(dir, e.what());
    }
}

Result<HfGpt2Weights> importHuggingFaceGpt2(const std::filesystem::path& dir)
{
    try {
        return importChecked(dir);
    } catch (const std::exception& e) {
        return importError(dir, e.what());
    }
}

} // namespace crowdtrain::engine
