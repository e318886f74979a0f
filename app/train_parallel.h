#pragma once

// crowdtrain-train's run under --zero, --tensor-parallel, --pipeline-parallel,
// --activation-checkpointing or --dtype bf16: engine::parallel::ParallelTrainer
// over the --nproc ranks, with the same progress lines, checkpoint, resume,
// export and summary as a plain run (the summary adds the training-state
// bytes per rank, the bytes sent per step and, for a pipeline, the bubble).

#include "app/args.h"
#include "engine/trainer.h"

#include <functional>
#include <optional>
#include <string>

namespace crowdtrain::app {

void declareParallelOptions(Args& a);
// Whether the arguments ask for anything the parallel trainer does.
bool wantsParallelTrainer(const Args& a);
// waitForRanks: waits for ranks 1..n-1 (the leader's children); the
// message names the first that failed.
int trainParallel(const Args& a, engine::TrainOptions options, engine::TrainData data, int rank, int nproc,
    const std::function<std::optional<std::string>()>& waitForRanks);

} // namespace crowdtrain::app
