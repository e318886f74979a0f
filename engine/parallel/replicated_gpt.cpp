#include "engine/parallel/replicated_gpt.h"

namespace crowdtrain::engine::parallel {

ReplicatedGpt::ReplicatedGpt(const GptConfig& config, uint64_t seed, torch::Device device)
    : m_config(config)
{
    torch::manual_seed(seed);
    m_model = Gpt(config);
    m_model->to(device);
    for (const auto& child : m_model->named_children()) {
        const std::string& name = child.key();
        if (name == "wte")
            m_wte = torch::nn::Embedding(std::dynamic_pointer_cast<torch::nn::EmbeddingImpl>(child.value()));
        else if (name == "wpe")
            m_wpe = torch::nn::Embedding(std::dynamic_pointer_cast<torch::nn::EmbeddingImpl>(child.value()));
        else if (name == "drop")
            m_drop = torch::nn::Dropout(std::dynamic_pointer_cast<torch::nn::DropoutImpl>(child.value()));
        else if (name == "ln_f")
            m_lnF = torch::nn::LayerNorm(std::dynamic_pointer_cast<torch::nn::LayerNormImpl>(child.value()));
        else if (name == "h")
            for (const auto& block : child.value()->children())
                m_blocks.emplace_back(std::dynamic_pointer_cast<BlockImpl>(block));
    }
    TORCH_CHECK(m_wte && m_wpe && m_drop && m_lnF && int64_t(m_blocks.size()) == config.nLayer,
        "engine::Gpt's modules are not the ones ReplicatedGpt expects");
}

torch::Tensor ReplicatedGpt::embed(const torch::Tensor& idx)
{
    const int64_t t = idx.size(1);
    const auto positions = torch::arange(t, torch::TensorOptions().dtype(torch::kLong).device(idx.device()));
    return m_drop->forward(m_wte->forward(idx) + m_wpe->forward(positions));
}

torch::Tensor ReplicatedGpt::block(int64_t i, const torch::Tensor& x)
{
    return m_blocks[std::size_t(i)]->forward(x);
}

torch::Tensor ReplicatedGpt::headLoss(const torch::Tensor& x, const torch::Tensor& targets)
{
    const auto logits = torch::nn::functional::linear(m_lnF->forward(x), m_wte->weight);
    return torch::nn::functional::cross_entropy(logits.view({-1, logits.size(-1)}), targets.reshape({-1}));
}

std::vector<ParamInfo> ReplicatedGpt::infos(const torch::nn::Module& module, const std::string& prefix)
{
    std::vector<ParamInfo> result;
    for (const auto& item : module.named_parameters()) {
        ParamInfo info;
        info.name = prefix + item.key();
        info.param = item.value();
        result.push_back(info);
    }
    return result;
}

std::vector<ParamInfo> ReplicatedGpt::embedParameters()
{
    auto result = infos(*m_wte, "wte.");
    for (auto& info : infos(*m_wpe, "wpe."))
        result.push_back(info);
    return result;
}

std::vector<ParamInfo> ReplicatedGpt::blockParameters(int64_t i)
{
    return infos(*m_blocks[std::size_t(i)], "h." + std::to_string(i) + ".");
}

std::vector<ParamInfo> ReplicatedGpt::headParameters()
{
    auto result = infos(*m_lnF, "ln_f.");
    for (auto& info : infos(*m_wte, "wte."))
        result.push_back(info);
    return result;
}

void ReplicatedGpt::dropExcept(const std::set<std::string>& names)
{
    torch::NoGradGuard noGrad;
    for (auto& item : m_model->named_parameters())
        if (!names.contains(item.key()))
            item.value().set_data(torch::empty({0}, item.value().options()));
}

} // namespace crowdtrain::engine::parallel
