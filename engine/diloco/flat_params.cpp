#include "engine/diloco/flat_params.h"

#include "engine/error_codes.h"
#include "engine/model_io.h"

#include <cstdio>
#include <cstring>

namespace crowdtrain::diloco {

Manifest manifestOf(engine::Gpt& model)
{
    Manifest manifest;
    for (const auto& [name, tensor] : engine::namedParameters(model)) {
        ManifestEntry entry{name, tensor.sizes().vec(), manifest.totalElements, tensor.numel()};
        manifest.totalElements += entry.numel;
        manifest.entries.push_back(std::move(entry));
    }
    return manifest;
}

engine::Gpt seededModel(const engine::GptConfig& config, uint64_t seed)
{
    torch::manual_seed(seed);
    engine::Gpt model(config);
    model->eval();
    return model;
}

std::vector<float> flatten(engine::Gpt& model)
{
    torch::NoGradGuard noGrad;
    const auto params = engine::namedParameters(model);
    int64_t total = 0;
    for (const auto& item : params)
        total += item.second.numel();
    std::vector<float> flat(static_cast<std::size_t>(total));
    int64_t offset = 0;
    for (const auto& item : params) {
        const torch::Tensor cpu = item.second.detach().to(torch::kCPU, torch::kFloat32).contiguous();
        std::memcpy(flat.data() + offset, cpu.data_ptr<float>(), static_cast<std::size_t>(cpu.numel()) * sizeof(float));
        offset += cpu.numel();
    }
    return flat;
}

Status assign(engine::Gpt& model, const float* flat, int64_t n)
{
    const auto params = engine::namedParameters(model);
    int64_t total = 0;
    for (const auto& item : params)
        total += item.second.numel();
    if (n != total)
        return Error::make(engine::errc::kBadSize,
            "flat vector has " + std::to_string(n) + " elements, the model has " + std::to_string(total));
    if (total > 0 && flat == nullptr)
        return Error::make(engine::errc::kBadArgument, "no flat vector to assign");
    torch::NoGradGuard noGrad;
    int64_t offset = 0;
    for (const auto& item : params) {
        torch::Tensor param = item.second;
        // from_blob does not copy; copy_ converts to the parameter's device and dtype.
        const torch::Tensor source
            = torch::from_blob(const_cast<float*>(flat + offset), param.sizes(), torch::kFloat32);
        param.copy_(source);
        offset += param.numel();
    }
    return Status::success();
}

} // namespace crowdtrain::diloco
