#include "app/train_memory.h"

#include "engine/error_codes.h"
#include "net/limits/machine.h"
#include "net/limits/memory.h"

#include <algorithm>
#include <cstdio>

// CMake defines CROWDTRAIN_CUDA_BUILD when libtorch was built with CUDA (a
// CPU libtorch may still ship the c10/cuda headers).
#if defined(CROWDTRAIN_CUDA_BUILD)
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#endif

namespace crowdtrain::app {
namespace {

struct Mode {
    const char* name;
    bool checkpointing, int8, hostMaster;
};

constexpr Mode kModes[] = {
    {"plain", false, false, false},
    {"checkpointed", true, false, false},
    {"int8", false, true, false},
    {"int8-checkpointed", true, true, false},
    {"bf16-host-master", true, true, true},
};

#if defined(CROWDTRAIN_CUDA_BUILD)
c10::DeviceIndex indexOf(const torch::Device& device)
{
    return device.has_index() ? device.index() : c10::DeviceIndex(0);
}
#endif

// Caps the CUDA caching allocator of the device at `gib`.
Status capAllocator([[maybe_unused]] const torch::Device& device, [[maybe_unused]] double gib)
{
#if defined(CROWDTRAIN_CUDA_BUILD)
    if (device.is_cuda()) {
        const c10::DeviceIndex index = indexOf(device);
        c10::cuda::set_device(index);
        size_t freeBytes = 0, totalBytes = 0;
        if (cudaMemGetInfo(&freeBytes, &totalBytes) != cudaSuccess || totalBytes == 0)
            return Error::make(engine::errc::kNoDevice, "cannot read the memory of " + device.str());
        const double fraction = std::min(1.0, gib * double(uint64_t(1) << 30) / double(totalBytes));
        c10::cuda::CUDACachingAllocator::setMemoryFraction(fraction, index);
        std::fprintf(stderr, "memory cap: %.1f GiB of %.1f GiB on %s (fraction %.4f)\n", gib,
            double(totalBytes) / double(uint64_t(1) << 30), device.str().c_str(), fraction);
        return Status::success();
    }
#endif
    return Error::make(engine::errc::kBadOptions,
        "--memory-cap-gib caps a CUDA device's allocator; " + device.str() + " is not one in this build");
}

} // namespace

void declareMemoryOptions(Args& a)
{
    a.numberOption("memory-cap-gib", "cap the CUDA allocator at this many GiB (0 = no cap)", "0");
    a.option("memory-plan",
        "one device's memory mode: none, auto (the volunteer's planner under --memory-cap-gib), plain, checkpointed, "
        "int8, int8-checkpointed or bf16-host-master",
        "none");
}

Result<std::string> applyMemoryOptions(const Args& a, engine::TrainOptions& options)
{
    const double cap = a.number("memory-cap-gib");
    const std::string plan = a.value("memory-plan");
    if (cap < 0)
        return Error::make(engine::errc::kBadOptions, "--memory-cap-gib must not be negative");
    auto device = engine::resolveDevice(options.device);
    if (!device)
        return device.error();
    if (cap > 0)
        if (Status capped = capAllocator(*device, cap); !capped)
            return capped.error();
    if (plan == "none")
        return std::string();
    const auto apply = [&](const Mode& mode) {
        options.activationCheckpointing = mode.checkpointing;
        options.int8Moments = mode.int8;
        options.bf16HostMaster = mode.hostMaster;
    };
    for (const Mode& mode : kModes)
        if (plan == mode.name) {
            apply(mode);
            return std::string(mode.name) + " (asked for)";
        }
    if (plan != "auto")
        return Error::make(engine::errc::kBadOptions,
            "--memory-plan is none, auto, plain, checkpointed, int8, int8-checkpointed or bf16-host-master, not '"
                + plan + "'");
    if (cap <= 0)
        return Error::make(engine::errc::kBadOptions, "--memory-plan auto plans under --memory-cap-gib: give one");
    const engine::GptConfig& m = options.model;
    const limits::ModelShape shape{
        m.nLayer, m.nHead, m.nEmbd, m.blockSize, m.vocabSize, engine::parameterCount(options.model)};
    const int64_t sequences = options.batchSize * options.gradAccumulationSteps;
    std::string why;
    const auto chosen = limits::planOneDevice(
        shape, sequences, uint64_t(cap * double(uint64_t(1) << 30)), why, limits::availableHostMemory().value_or(0));
    if (!chosen)
        return Error::make(engine::errc::kBadOptions, why);
    apply({"", chosen->activationCheckpointing, chosen->int8Moments, chosen->bf16HostMaster});
    options.batchSize = chosen->microBatch;
    options.gradAccumulationSteps = sequences / chosen->microBatch;
    return chosen->reason + "; " + std::to_string(options.batchSize) + " x "
        + std::to_string(options.gradAccumulationSteps) + " micro-batches a step";
}

nlohmann::json deviceMemoryReport([[maybe_unused]] const torch::Device& device)
{
#if defined(CROWDTRAIN_CUDA_BUILD)
    if (device.is_cuda()) {
        const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(indexOf(device));
        const auto all = static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE);
        return {{"peak_allocated_bytes", stats.allocated_bytes[all].peak},
            {"peak_reserved_bytes", stats.reserved_bytes[all].peak},
            {"allocated_bytes", stats.allocated_bytes[all].current}};
    }
#endif
    return nlohmann::json::object();
}

} // namespace crowdtrain::app
