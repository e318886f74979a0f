#include "engine/diloco/flat_params.h"

#include "engine/error_codes.h"
#include "engine/model_io.h"

#include "core/file_io.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>

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
    return flatten(engine::namedParameters(model));
}

std::vector<float> flatten(const engine::NamedParameters& params)
{
    torch::NoGradGuard noGrad;
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
    return assign(engine::namedParameters(model), flat, n);
}

Status assign(const engine::NamedParameters& params, const float* flat, int64_t n)
{
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

Status borrow(engine::Gpt& model, const float* flat, int64_t n)
{
    const auto params = engine::namedParameters(model);
    int64_t total = 0;
    for (const auto& item : params)
        total += item.second.numel();
    if (n != total || (total > 0 && flat == nullptr))
        return Error::make(engine::errc::kBadSize,
            "flat vector has " + std::to_string(n) + " elements, the model has " + std::to_string(total));
    torch::NoGradGuard noGrad;
    int64_t offset = 0;
    for (const auto& item : params) {
        torch::Tensor param = item.second;
        param.set_data(torch::from_blob(const_cast<float*>(flat + offset), param.sizes(), torch::kFloat32));
        offset += param.numel();
    }
    return Status::success();
}

namespace {

bool directlyWritable(const torch::Tensor& t)
{
    return t.device().is_cpu() && t.scalar_type() == torch::kFloat32 && t.is_contiguous();
}

} // namespace

Status assignFromFile(engine::Gpt& model, const std::filesystem::path& file)
{
    return assignFromFile(engine::namedParameters(model), file);
}

Status assignFromFile(const engine::NamedParameters& params, const std::filesystem::path& file)
{
    int64_t total = 0;
    for (const auto& item : params)
        total += item.second.numel();
    std::error_code ec;
    const auto bytes = std::filesystem::file_size(file, ec);
    if (ec)
        return core::ioError("cannot read the size of", file, ec.value());
    if (bytes != uint64_t(total) * sizeof(float))
        return Error::make(engine::errc::kBadSize,
            file.string() + " holds " + std::to_string(bytes) + " bytes, not the model's " + std::to_string(total)
                + " floats");
    std::ifstream in(file, std::ios::binary);
    if (!in)
        return core::ioError("cannot open", file);
    torch::NoGradGuard noGrad;
    std::vector<float> buffer;
    for (const auto& item : params) {
        torch::Tensor param = item.second;
        const auto size = std::streamsize(param.numel() * int64_t(sizeof(float)));
        if (directlyWritable(param)) {
            in.read(reinterpret_cast<char*>(param.data_ptr<float>()), size);
        } else {
            buffer.resize(std::size_t(param.numel()));
            in.read(reinterpret_cast<char*>(buffer.data()), size);
            param.copy_(torch::from_blob(buffer.data(), param.sizes(), torch::kFloat32));
        }
        if (!in)
            return core::ioError("cannot read", file);
    }
    return Status::success();
}

Status writeFlatFile(engine::Gpt& model, const std::filesystem::path& file)
{
    return writeFlatFile(engine::namedParameters(model), file);
}

Status writeFlatFile(const engine::NamedParameters& params, const std::filesystem::path& file)
{
    torch::NoGradGuard noGrad;
    auto out = core::AtomicFile::create(file);
    if (!out)
        return out.error();
    for (const auto& item : params) {
        const torch::Tensor cpu = item.second.detach().to(torch::kCPU, torch::kFloat32).contiguous();
        const float* values = cpu.data_ptr<float>();
        for (int64_t i = 0; i < cpu.numel(); ++i)
            if (!std::isfinite(values[i]))
                return Error::make(engine::errc::kNonFinite, "weight " + item.first + " is not finite");
        if (Status wrote = out->write(values, std::size_t(cpu.numel()) * sizeof(float)); !wrote)
            return wrote;
    }
    return out->commit();
}

} // namespace crowdtrain::diloco
