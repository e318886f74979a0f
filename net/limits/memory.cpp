#include "net/limits/memory.h"

#include <algorithm>
#include <cstdio>

namespace crowdtrain::limits {

uint64_t fixedTrainingBytes(const ModelShape& model)
{
    return uint64_t(model.parameters) * 16;
}

uint64_t bytesPerSequence(const ModelShape& model)
{
    const uint64_t t = uint64_t(model.block);
    const uint64_t perLayer = t * uint64_t(model.width) * 34 + 5 * uint64_t(model.heads) * t * t;
    return uint64_t(model.layers) * perLayer + t * uint64_t(model.vocab) * 10;
}

namespace {

std::string mib(uint64_t bytes)
{
    return std::to_string((bytes + (1 << 20) - 1) >> 20) + " MiB";
}

// The largest divisor of `batch` whose sequences fit beside `fixed`.
std::optional<int64_t> largestFit(uint64_t fixed, uint64_t perSequence, int64_t batch, uint64_t budgetBytes)
{
    const uint64_t usable = budgetBytes - budgetBytes / 10;
    if (batch < 1 || fixed + perSequence > usable)
        return std::nullopt;
    for (int64_t micro = batch; micro > 1; --micro)
        if (batch % micro == 0 && fixed + uint64_t(micro) * perSequence <= usable)
            return micro;
    return 1;
}

} // namespace

std::optional<int64_t> chooseMicroBatch(const ModelShape& model, int64_t batch, uint64_t budgetBytes, std::string& why)
{
    const uint64_t fixed = fixedTrainingBytes(model);
    const uint64_t perSequence = bytesPerSequence(model);
    auto micro = largestFit(fixed, perSequence, batch, budgetBytes);
    if (!micro)
        why = "the model needs about " + mib(fixed + perSequence + (budgetBytes / 10))
            + " of GPU memory; the limit allows " + mib(budgetBytes);
    return micro;
}

uint64_t checkpointedBytesPerSequence(const ModelShape& model)
{
    const uint64_t t = uint64_t(model.block);
    const uint64_t oneLayer = t * uint64_t(model.width) * 34 + 5 * uint64_t(model.heads) * t * t;
    return uint64_t(model.layers) * t * uint64_t(model.width) * 4 + oneLayer + t * uint64_t(model.vocab) * 10;
}

namespace {

// The 8-bit moments: one byte each, and a float32 scale per block of 256
// for each of the two.
uint64_t int8MomentBytes(const ModelShape& model)
{
    const uint64_t p = uint64_t(model.parameters);
    return 2 * p + 8 * ((p + 255) / 256);
}

std::string gib(uint64_t bytes)
{
    char text[32];
    std::snprintf(text, sizeof text, "%.1f GiB", double(bytes) / double(uint64_t(1) << 30));
    return text;
}

} // namespace

uint64_t int8MomentsTrainingBytes(const ModelShape& model)
{
    return uint64_t(model.parameters) * 8 + int8MomentBytes(model);
}

uint64_t bf16HostMasterTrainingBytes(const ModelShape& model)
{
    return uint64_t(model.parameters) * 4;
}

uint64_t bf16HostMasterHostBytes(const ModelShape& model)
{
    return uint64_t(model.parameters) * 4 + int8MomentBytes(model);
}

uint64_t volunteerHostBytes(const ModelShape& model)
{
    return uint64_t(model.parameters) * 10;
}

uint64_t shardedTrainingBytes(const ModelShape& model, int devices)
{
    const uint64_t c = uint64_t(model.width);
    const uint64_t embeddings = (uint64_t(model.vocab) + uint64_t(model.block) + 2) * c;
    const uint64_t block = 12 * c * c + 13 * c;
    const uint64_t n = uint64_t(std::max(devices, 1));
    return (fixedTrainingBytes(model) + n - 1) / n + 4 * embeddings + 8 * block;
}

std::optional<DevicePlan> planOneDevice(
    const ModelShape& model, int64_t batch, uint64_t budgetBytes, std::string& why, uint64_t hostBudgetBytes)
{
    const uint64_t usable = budgetBytes - budgetBytes / 10;
    const uint64_t plainFixed = fixedTrainingBytes(model);
    const uint64_t plain = bytesPerSequence(model), checkpointed = checkpointedBytesPerSequence(model);
    DevicePlan plan;
    const std::string of = " of " + gib(usable) + " usable";
    // Each mode in turn, the first that holds one sequence beside its state.
    struct Mode {
        uint64_t fixed, perSequence;
        bool checkpointing, int8, hostMaster;
        const char* words;
    };
    const Mode modes[] = {
        {plainFixed, plain, false, false, false, "plain: fp32 weights, gradients and AdamW moments (16 B a parameter)"},
        {plainFixed, checkpointed, true, false, false,
            "activation checkpointing per block: the fp32 state (16 B a parameter) leaves too little for a "
            "sequence's activations"},
        {int8MomentsTrainingBytes(model), plain, false, true, false,
            "8-bit AdamW moments (10 B a parameter): the fp32 state (16 B a parameter) does not fit"},
        {int8MomentsTrainingBytes(model), checkpointed, true, true, false,
            "8-bit AdamW moments (10 B a parameter) with activation checkpointing: the fp32 state (16 B a "
            "parameter) does not fit"},
        {bf16HostMasterTrainingBytes(model), checkpointed, true, true, true,
            "bf16 weights and gradients on the GPU (4 B a parameter), the fp32 master weights and 8-bit AdamW "
            "moments in host RAM (6 B a parameter), activation checkpointing: 10 B a parameter do not fit"},
    };
    const uint64_t volunteerOwn = volunteerHostBytes(model);
    const uint64_t hostNeeds = bf16HostMasterHostBytes(model) + volunteerOwn;
    for (const Mode& mode : modes) {
        auto micro = largestFit(mode.fixed, mode.perSequence, batch, budgetBytes);
        if (!micro)
            continue;
        if (mode.hostMaster && hostBudgetBytes > 0 && hostNeeds > hostBudgetBytes) {
            why = "the model fits " + gib(budgetBytes) + " of GPU memory only with its fp32 master weights and 8-bit "
                + "AdamW moments in host RAM, which needs about " + gib(hostNeeds) + " of RAM with the volunteer's own "
                + gib(volunteerOwn) + "; " + gib(hostBudgetBytes) + " is available";
            return std::nullopt;
        }
        plan.microBatch = *micro;
        plan.fixedBytes = mode.fixed;
        plan.activationCheckpointing = mode.checkpointing;
        plan.int8Moments = mode.int8;
        plan.bf16HostMaster = mode.hostMaster;
        plan.hostBytes = mode.hostMaster ? bf16HostMasterHostBytes(model) : 0;
        plan.reason = std::string(mode.words) + "; state " + gib(mode.fixed) + " + " + std::to_string(*micro)
            + " sequence(s) a pass at " + gib(mode.perSequence) + of;
        return plan;
    }
    why = "the model needs about " + mib(bf16HostMasterTrainingBytes(model) + checkpointed + budgetBytes / 10)
        + " of GPU memory even with bf16 weights (the master and moments in host RAM) and activation "
          "checkpointing; the limit allows "
        + mib(budgetBytes);
    return std::nullopt;
}

std::optional<DevicePlan> planDevices(const ModelShape& model, int64_t batch, int devices, uint64_t budgetBytes,
    std::string& why, uint64_t hostBudgetBytes)
{
    DevicePlan plan;
    for (int n = std::max(devices, 1); n >= 1; --n)
        if (batch % n == 0) {
            plan.devices = n;
            break;
        }
    const int64_t share = batch / plan.devices;
    if (plan.devices == 1) {
        plan.fixedBytes = fixedTrainingBytes(model);
        if (budgetBytes == 0) {
            plan.microBatch = batch;
            return plan;
        }
        return planOneDevice(model, batch, budgetBytes, why, hostBudgetBytes);
    }
    const uint64_t perSequence = bytesPerSequence(model);
    plan.mode = DeviceMode::DataParallel;
    plan.fixedBytes = fixedTrainingBytes(model);
    if (budgetBytes == 0) {
        plan.microBatch = share;
        return plan;
    }
    if (auto micro = largestFit(plan.fixedBytes, perSequence, share, budgetBytes)) {
        plan.microBatch = *micro;
        return plan;
    }
    plan.mode = DeviceMode::Sharded;
    plan.fixedBytes = shardedTrainingBytes(model, plan.devices);
    if (auto micro = largestFit(plan.fixedBytes, perSequence, share, budgetBytes)) {
        plan.microBatch = *micro;
        return plan;
    }
    const uint64_t checkpointed = checkpointedBytesPerSequence(model);
    if (auto micro = largestFit(plan.fixedBytes, checkpointed, share, budgetBytes)) {
        plan.microBatch = *micro;
        plan.activationCheckpointing = true;
        return plan;
    }
    why = "the model needs about " + mib(plan.fixedBytes + checkpointed + budgetBytes / 10) + " of memory on each of "
        + std::to_string(plan.devices) + " GPUs even sharded (ZeRO-3) with activation checkpointing; the limit allows "
        + mib(budgetBytes);
    return std::nullopt;
}

uint64_t memoryBudget(uint64_t totalBytes, uint64_t limitMib, uint64_t freeMib)
{
    if (limitMib > 0)
        return limitMib << 20;
    const uint64_t keep = freeMib << 20;
    return totalBytes > keep ? totalBytes - keep : 0;
}

} // namespace crowdtrain::limits
