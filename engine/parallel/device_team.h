#pragma once

// One process training across several devices of its own machine (a
// volunteer with two GPUs): one rank per device, each a thread with its own
// ParallelTrainer, the ranks joined in a Mesh of in-process ranks (a shared
// c10d::HashStore; NCCL between GPUs, Gloo over loopback between CPU
// "devices", which the tests use). ZeRO stage 0 is data parallel (the model
// fits one device); stage 3 shards parameters, gradients and AdamW state
// (it does not). The ranks draw one global batch from one shared source and
// each trains its rows, so a step matches one device training the whole
// batch up to the order of floating-point sums. Every call runs on all
// ranks and waits for them, so their collectives always match.
//
// Used from one thread at a time. A rank that throws breaks the team: its
// peers leave the collectives they wait in (Gloo) or fail at their next one
// and the call rethrows the first failure; every later call but the
// destructor throws TeamBroken at once. NCCL gets the team's timeout, so a
// peer stuck on the GPU is ended by NCCL's watchdog. Destroying a broken team
// may wait up to the timeout for a Gloo collective left in flight.

#include "core/result.h"
#include "engine/batch_source.h"
#include "engine/trainer.h"

#include <atomic>
#include <memory>
#include <vector>

namespace crowdtrain::engine {
class ThreadTeam;
}

namespace crowdtrain::engine::parallel {

class ParallelTrainer;
class SharedBatches;

struct DeviceTeamOptions {
    std::vector<std::string> devices{}; // one rank each: "cuda:0", "cuda:1"; or "cpu", "cpu"
    int zeroStage = 0; // 0: data parallel; 3: fully sharded
    int threadsPerRank = 1; // torch intra-op threads on each rank's thread
    bool bf16Autocast = true; // on CUDA only, as Trainer's: fp32 weights, bf16 forward
    bool activationCheckpointing = false; // per block: keeps its input, reruns its forward in the backward
    std::chrono::milliseconds timeout{60000}; // a collective's longest wait
};

class DeviceTeam {
public:
    // options.batchSize: rows per micro-batch on each device;
    // gradAccumulationSteps: micro-batches per step. A step trains
    // devices x batchSize x gradAccumulationSteps rows. The schedule,
    // evaluation, cpuReplicas and bf16Autocast options are not used
    // (team.bf16Autocast is).
    static Result<std::unique_ptr<DeviceTeam>> create(
        TrainOptions options, DeviceTeamOptions team, std::unique_ptr<BatchSource> source);
    ~DeviceTeam();
    DeviceTeam(const DeviceTeam&) = delete;
    DeviceTeam& operator=(const DeviceTeam&) = delete;

    // The source the next steps draw from (its block size checked by the caller).
    void setSource(std::unique_ptr<BatchSource> source);
    // The model's values from a flat vector (diloco/flat_params.h order),
    // keeping AdamW's moments. "bad_size" unless n is the parameter count.
    Status assign(const float* flat, int64_t n);
    StepReport step(double learningRate);
    // The whole model as a flat vector, fp32 on the CPU.
    std::vector<float> flatten();

    int size() const { return int(m_trainers.size()); }
    int zeroStage() const { return m_options.zeroStage; }
    int64_t stepCount() const;
    // The largest peak of the ranks' tracked model state, in bytes.
    int64_t peakStateBytes() const;
    // Whether a rank has failed: the team is of no more use.
    bool broken() const;

private:
    DeviceTeam(DeviceTeamOptions options, int64_t parameters);
    // Runs work(rank) on every rank's thread; rethrows the first failure.
    void onEveryRank(const std::function<void(int rank)>& work);

    DeviceTeamOptions m_options;
    int64_t m_parameters;
    std::unique_ptr<SharedBatches> m_batches;
    std::vector<std::unique_ptr<ParallelTrainer>> m_trainers;
    std::unique_ptr<ThreadTeam> m_threads;
    std::shared_ptr<std::atomic<bool>> m_broken = std::make_shared<std::atomic<bool>>(false);
};

} // namespace crowdtrain::engine::parallel
