#include "net/limits/memory.h"

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

std::optional<int64_t> chooseMicroBatch(const ModelShape& model, int64_t batch, uint64_t budgetBytes, std::string& why)
{
    const uint64_t usable = budgetBytes - budgetBytes / 10;
    const uint64_t fixed = fixedTrainingBytes(model);
    const uint64_t perSequence = bytesPerSequence(model);
    auto mib = [](uint64_t bytes) { return std::to_string((bytes + (1 << 20) - 1) >> 20) + " MiB"; };
    if (batch < 1 || fixed + perSequence > usable) {
        why = "the model needs about " + mib(fixed + perSequence + (budgetBytes / 10))
            + " of GPU memory; the limit allows " + mib(budgetBytes);
        return std::nullopt;
    }
    for (int64_t micro = batch; micro > 1; --micro)
        if (batch % micro == 0 && fixed + uint64_t(micro) * perSequence <= usable)
            return micro;
    return 1;
}

uint64_t memoryBudget(uint64_t totalBytes, uint64_t limitMib, uint64_t freeMib)
{
    if (limitMib > 0)
        return limitMib << 20;
    const uint64_t keep = freeMib << 20;
    return totalBytes > keep ? totalBytes - keep : 0;
}

} // namespace crowdtrain::limits
