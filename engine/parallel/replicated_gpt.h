#pragma once

// The whole engine::Gpt behind StagedModel: the same modules and forward
// code as the single-device trainer, called part by part.

#include "engine/gpt.h"
#include "engine/parallel/staged_model.h"

namespace crowdtrain::engine::parallel {

class ReplicatedGpt : public StagedModel {
public:
    // The model is built from the config after torch::manual_seed(seed),
    // as engine::Trainer builds it.
    ReplicatedGpt(const GptConfig& config, uint64_t seed, torch::Device device);

    int64_t blockCount() const override { return m_config.nLayer; }
    torch::Tensor embed(const torch::Tensor& idx) override;
    torch::Tensor block(int64_t i, const torch::Tensor& x) override;
    torch::Tensor headLoss(const torch::Tensor& x, const torch::Tensor& targets) override;
    std::vector<ParamInfo> embedParameters() override;
    std::vector<ParamInfo> blockParameters(int64_t i) override;
    std::vector<ParamInfo> headParameters() override;
    torch::Tensor localPart(const std::string&, const torch::Tensor& whole) override { return whole; }
    torch::Tensor wholeOf(const std::string&, const torch::Tensor& part) override { return part; }

    void dropExcept(const std::set<std::string>& names) override;

    Gpt& model() { return m_model; }

private:
    std::vector<ParamInfo> infos(const torch::nn::Module& module, const std::string& prefix);

    GptConfig m_config;
    Gpt m_model{nullptr};
    torch::nn::Embedding m_wte{nullptr};
    torch::nn::Embedding m_wpe{nullptr};
    torch::nn::Dropout m_drop{nullptr};
    std::vector<Block> m_blocks;
    torch::nn::LayerNorm m_lnF{nullptr};
};

} // namespace crowdtrain::engine::parallel
