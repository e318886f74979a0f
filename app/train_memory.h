#pragma once

// crowdtrain-train's device-memory options (issue 41, item 4): a cap on the
// CUDA allocator (--memory-cap-gib, as the volunteer's budget caps the
// core), the single-device memory mode (--memory-plan: the planner's choice
// under the cap, or one named), and the allocator's peak for the summary.

#include "app/args.h"
#include "core/result.h"
#include "engine/trainer.h"

#include <nlohmann/json.hpp>
#include <string>

namespace crowdtrain::app {

void declareMemoryOptions(Args& a);

// Sets the options' memory mode (and, for the planner's choice, the
// micro-batch: the step's sequences then come by gradient accumulation) and
// caps the allocator of a CUDA device. Returns the mode's description
// ("" when none was asked for). Errors: an unknown mode, "auto" without a
// cap, a cap on a build or device without CUDA, a model that fits no mode.
Result<std::string> applyMemoryOptions(const Args& a, engine::TrainOptions& options);

// The CUDA allocator's peak and current bytes on `device` since the start
// ({} on a CPU or a build without CUDA).
nlohmann::json deviceMemoryReport(const torch::Device& device);

} // namespace crowdtrain::app
