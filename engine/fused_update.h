#pragma once

// The update a GPU runs, with nothing read back to the host inside the step
// (issue 41 item 5): the gradient norm, the clipping coefficient and the
// non-finite skip stay tensors on the device, and AdamW runs as
// at::_fused_adamw_ (a few multi-tensor kernels for the whole model) where
// the build has it for the device: CUDA with libtorch >= 2.0. Elsewhere (a
// CPU asked for this path, libtorch 1.x) the same update runs as per-tensor
// ops, masked by the finite flag. The moments live in the optimizer's own
// state, so Trainer::saveState / loadState are unchanged; the step counts
// there are advanced by finish(), once the caller has read the norm.
// The CPU's default update is engine/cpu_kernels.h's FusedAdamW.

#include <string>
#include <torch/torch.h>
#include <vector>

namespace crowdtrain::engine {

class SyncFreeAdamW {
public:
    // Clips the gradients of the optimizer's parameters to a total L2 norm
    // of maxNorm (0: no clipping; clip_grad_norm_'s rule) and applies AdamW
    // unless that norm is not finite, in which case weights and moments stay
    // as they were. Returns the norm before clipping: a 0-dim float tensor on
    // the parameters' device, not yet read. Call finish() after reading it.
    torch::Tensor step(torch::optim::AdamW& optimizer, double maxNorm);
    // Counts the step in the optimizer's state of each parameter step()
    // updated, when it was applied (the norm was finite).
    void finish(bool applied);

    // Whether step() runs at::_fused_adamw_ on this device in this build.
    static bool fusedOn(torch::Device device);
    // The kernel step() uses on a device, in words (for the program's log).
    static std::string describe(torch::Device device);

private:
    std::vector<torch::optim::AdamWParamState*> m_pending;
};

// The optimizer's state of a parameter, created (step 0, zero moments) if
// the parameter has none yet.
torch::optim::AdamWParamState& adamWStateOf(torch::optim::AdamW& optimizer, const torch::Tensor& param);

} // namespace crowdtrain::engine
