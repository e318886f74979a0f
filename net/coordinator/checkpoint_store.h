#pragma once

// Published checkpoints: every N rounds the coordinator writes theta_v as a
// Hugging Face GPT-2 folder that GPT2LMHeadModel.from_pretrained loads:
//   CHECKPOINTS/round-<R>/model.safetensors, config.json   (engine::exportHuggingFaceGpt2)
//   CHECKPOINTS/round-<R>/samples.json   (when the project has prompts: what
//     the model wrote after each, seeded; see ProjectSpec::prompts)
//   CHECKPOINTS/round-<R>/metadata.json
//     {"round": R, "tokens": T, "val_loss": L or null, "created": "2024-05-20T12:00:00Z",
//      "created_ms": ..., "files": [{"name": "config.json", "bytes": N, "sha256": "..."}, ...]}
// A folder is built under a hidden temporary name and renamed into place,
// so a listed checkpoint is always complete. Retention keeps the last
// keep_last checkpoints plus every round divisible by milestone_every.
//
// A CheckpointStore is used from one thread; readers of the folders (the
// transfer service) may run concurrently, since published folders are never
// modified, only removed whole.

#include "net/coordinator/project_spec.h"

#include "core/result.h"
#include "engine/gpt_config.h"
#include "engine/safetensors.h"

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace crowdtrain::coordinator {

struct CheckpointFile {
    std::string name;
    uint64_t bytes = 0;
    std::string sha256; // lowercase hex
};

struct CheckpointInfo {
    int64_t round = 0;
    int64_t tokens = 0;
    std::optional<double> valLoss;
    std::string created; // ISO 8601 UTC
    int64_t createdMs = 0;
    std::filesystem::path dir;
    std::vector<CheckpointFile> files;
    uint64_t totalBytes() const;
};

// The flat parameter vector (docs/protocol.md, §7) as named tensors in
// engine::gptParameterShapes(config) order; error when the size is wrong.
Result<engine::NamedTensors> unflattenParameters(const engine::GptConfig& config, std::span<const float> flat);
// The same as views over `flat`, no copy (a checkpoint's export at GPT-2
// 1.5B would otherwise hold 6 GB more): valid while `flat` lives, read only.
Result<engine::NamedTensors> parameterViews(const engine::GptConfig& config, std::span<const float> flat);

class CheckpointStore {
public:
    // Creates the folder when missing and removes temporary folders left by
    // an interrupted publish.
    static Result<CheckpointStore> open(const std::filesystem::path& dir, const CheckpointSpec& retention);

    // Writes round-<round>/ and applies retention. Error if it already
    // exists. `extraFiles` (name -> contents, e.g. samples.json) are written
    // beside the model and listed in the metadata like its files.
    Result<CheckpointInfo> publish(int64_t round, int64_t tokens, std::optional<double> valLoss,
        const engine::GptConfig& config, const engine::NamedTensors& parameters, int64_t nowMs,
        const std::map<std::string, std::string>& extraFiles = {});

    // Every published checkpoint, oldest first. Folders without a readable
    // metadata.json are skipped.
    Result<std::vector<CheckpointInfo>> list() const;
    Result<CheckpointInfo> find(int64_t round) const;

    // Removes checkpoints that retention does not keep; returns their rounds.
    Result<std::vector<int64_t>> applyRetention();

    // Whether the project publishes a checkpoint after `round`.
    bool isDue(int64_t round) const;

    const std::filesystem::path& dir() const { return m_dir; }

private:
    CheckpointStore(std::filesystem::path dir, CheckpointSpec retention);

    std::filesystem::path m_dir;
    CheckpointSpec m_retention;
};

} // namespace crowdtrain::coordinator
