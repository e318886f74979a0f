#pragma once

// Counts the ATen operators this thread runs (and the autograd threads it
// starts) while an OpCount lives, with libtorch's RecordFunction callbacks:
// how many, and how many read a value back to the host (item(), that is
// aten::_local_scalar_dense: on CUDA each waits for the device), split into
// those inside the trainer's end-of-step read (the kStepRead scope) and
// those elsewhere, which stall the device's queue in the middle of a step.
// One OpCount at a time per process.

#include <atomic>
#include <cstdint>

namespace crowdtrain::engine {

// The scope Trainer::step() reads the step's loss and gradient norm in.
inline constexpr const char* kStepRead = "crowdtrain::step_read";

struct OpCounts {
    int64_t ops = 0; // ATen operator calls, nested ones included
    int64_t hostReads = 0; // _local_scalar_dense calls outside kStepRead
    int64_t stepReads = 0; // kStepRead scopes entered
};

class OpCount {
public:
    OpCount();
    ~OpCount();
    OpCount(const OpCount&) = delete;
    OpCount& operator=(const OpCount&) = delete;

    OpCounts counts() const;

private:
    uint64_t m_handle = 0;
};

} // namespace crowdtrain::engine
