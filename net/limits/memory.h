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
// Several devices in one machine (issue 27): the task's batch is split
// evenly between them; data parallel keeps the fixed part whole on each,
// ZeRO-3 keeps 16/n bytes a parameter on each plus the units it gathers
// whole (the embeddings for a micro-batch, one block's parameters and
// gradient buffer at a time: 4 bytes an element each). The plan takes data
// parallel when a sequence fits beside the whole fixed part, else ZeRO-3,
// else ZeRO-3 with activation checkpointing per block (a sequence then
// keeps each block's fp32 input, T*C*4 bytes a layer, plus one block's
// activations while it is recomputed, plus the logits).
// One device (issue 41): the whole state when it fits beside a sequence;
// else activation checkpointing per block; else AdamW's moments in 8 bits
// (engine/adamw8bit.h: 4 + 4 + 2 bytes a parameter, plus 8 bytes a block
// of 256), with checkpointing when a plain sequence does not fit beside
// them; else bf16 weights and gradients on the device (2 + 2 bytes a
// parameter) with the fp32 master weights and the 8-bit moments in host RAM
// (4 + 2 bytes a parameter there: engine/host_master.h), always
// checkpointed. That last mode is taken only when its host RAM, beside
// what the volunteer itself keeps there (volunteerHostBytes: theta, the
// error-feedback residual and the payload, 10 bytes a parameter), fits the
// host budget (the RAM available when the project started; 0: not known,
// not checked): a 1.5B model's is 9.4 + 15.6 GB, and a volunteer with 16 GB
// of RAM would swap or be killed. The plan's `reason`
// says which and why, in words for the volunteer's status.
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

enum class DeviceMode { Single, DataParallel, Sharded };

struct DevicePlan {
    int devices = 1; // used: the most, up to those offered, that divide the batch
    DeviceMode mode = DeviceMode::Single;
    int64_t microBatch = 1; // sequences per forward/backward pass on each device
    uint64_t fixedBytes = 0; // per device
    bool activationCheckpointing = false; // per block
    bool int8Moments = false; // AdamW's moments in 8 bits (one device)
    bool bf16HostMaster = false; // bf16 weights and gradients on the device, fp32 master in host RAM
    uint64_t hostBytes = 0; // host RAM the optimizer's state takes besides (the master and moments)
    std::string reason; // the choice, and why, for `status`
};

// The state one device holds in each single-device mode (weights,
// gradients, AdamW's moments): 16, 10 (plus the 8-bit moments' block
// scales) and 4 bytes a parameter; and the host RAM of the last (the master
// and the moments: 6 and the scales).
uint64_t int8MomentsTrainingBytes(const ModelShape& model);
uint64_t bf16HostMasterTrainingBytes(const ModelShape& model);
uint64_t bf16HostMasterHostBytes(const ModelShape& model);
// What a volunteer keeps in host RAM for a task whatever the device: theta
// (4), the error-feedback residual (4) and the payload (up to 2) bytes a
// parameter.
uint64_t volunteerHostBytes(const ModelShape& model);

uint64_t shardedTrainingBytes(const ModelShape& model, int devices);
uint64_t checkpointedBytesPerSequence(const ModelShape& model);

// One device of `budgetBytes` (> 0): the first mode that fits, as above,
// in a host with `hostBudgetBytes` of RAM to spare (0: not checked).
std::optional<DevicePlan> planOneDevice(
    const ModelShape& model, int64_t batch, uint64_t budgetBytes, std::string& why, uint64_t hostBudgetBytes = 0);

// The plan for `batch` sequences a step on up to `devices` devices of
// `budgetBytes` each (0: no cap: data parallel, the whole share at once);
// nullopt when no mode fits one sequence (`why` then says so).
std::optional<DevicePlan> planDevices(const ModelShape& model, int64_t batch, int devices, uint64_t budgetBytes,
    std::string& why, uint64_t hostBudgetBytes = 0);

// The budget the settings give on a device of `totalBytes`: the cap when set
// (0 = auto), else all but `freeMib` MiB.
uint64_t memoryBudget(uint64_t totalBytes, uint64_t limitMib, uint64_t freeMib);

} // namespace crowdtrain::limits
