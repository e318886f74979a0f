#pragma once

// bf16 autocast on CUDA for a scope (the forward pass, or a checkpointed
// block's recomputation); a no-op when not enabled. libtorch 2.4 replaced
// the CUDA-only switches with per-device ones (and deprecated the old,
// which -Werror turns into a build failure). Per thread, as autocast is.

#include <ATen/autocast_mode.h>
#include <torch/version.h>

namespace crowdtrain::engine {

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
inline void setCudaAutocast(bool enabled)
{
    at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
    at::autocast::set_autocast_enabled(at::kCUDA, enabled);
}
#else
inline void setCudaAutocast(bool enabled)
{
    at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
    at::autocast::set_enabled(enabled);
}
#endif

class AutocastScope {
public:
    explicit AutocastScope(bool enable)
        : m_enabled(enable)
    {
        if (m_enabled)
            setCudaAutocast(true);
    }
    AutocastScope(const AutocastScope&) = delete;
    AutocastScope& operator=(const AutocastScope&) = delete;
    ~AutocastScope()
    {
        if (m_enabled) {
            setCudaAutocast(false);
            at::autocast::clear_cache();
        }
    }

private:
    bool m_enabled;
};

} // namespace crowdtrain::engine
