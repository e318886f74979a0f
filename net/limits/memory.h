#pragma once

// The GPU memory cap (issue 16): the largest micro-batch that fits a budget,
// the task's batch then reached by gradient accumulation. An estimate, on
// the safe side, of what training GPT-2 needs on a CUDA device with bf16
// autocast:
//   fixed        16 bytes a parameter (fp32 weights, gradients, AdamW's two moments)
//   a sequence   per layer T*C*34 + 5*H*T*T bytes of saved activations
//                (Korthikanti et al., 2022, for 16-bit activations), plus the
//                logits: T*V*10 bytes (bf16 logits, fp32 softmax and gradient)
//   slack        10% of the budget for the allocator's fragmentation and
//                CUDA's own workspace.
// No libtorch here: the caller passes the model's numbers.

#include <cstdint>
#include <optional>
#include <string>

namespace crowdtrain::limits {

struct ModelShape {
    int64_t layers = 0;
    int64_t heads = 0;
    int64_t width = 0; // n_embd
    int64_t block = 0; // sequence length
    int64_t vocab = 0;
    int64_t parameters = 0;
};

uint64_t fixedTrainingBytes(const ModelShape& model);
uint64_t bytesPerSequence(const ModelShape& model);

// The largest divisor of `batch` whose sequences fit `budgetBytes` beside
// the fixed part; nullopt when not even one does (`why` then says so).
std::optional<int64_t> chooseMicroBatch(const ModelShape& model, int64_t batch, uint64_t budgetBytes, std::string& why);

// The budget the settings give on a device of `totalBytes`: the cap when set
// (0 = auto), else all but `freeMib` MiB.
uint64_t memoryBudget(uint64_t totalBytes, uint64_t limitMib, uint64_t freeMib);

} // namespace crowdtrain::limits
