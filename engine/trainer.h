#pragma once

// Trains a GPT model with AdamW from a BatchSource: warmup + cosine schedule,
// gradient accumulation and clipping, periodic validation, optional local
// data parallel; run() asks its caller before each step, so the caller can
// pause or stop it at step boundaries. Deterministic for a seed on CPU. Used
// from one thread.

#include "core/result.h"
#include "engine/batch_source.h"
#include "engine/gpt.h"
#include "engine/lr_schedule.h"

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>

namespace crowdtrain::engine {

class AdamW8bit;
class AdamW8bitTensors;
class DataParallel;
class SyncFreeAdamW;
class HostMaster;
class ThreadTeam;

struct TrainOptions {
    GptConfig model;
    int64_t batchSize = 12; // sequences per micro-step per rank
    int64_t gradAccumulationSteps = 1;
    int64_t maxIters = 2000;
    LrSchedule schedule;
    double beta1 = 0.9;
    double beta2 = 0.95;
    double weightDecay = 0.1;
    double gradClip = 1.0; // 0 disables clipping
    int64_t evalInterval = 250; // 0 disables periodic evaluation
    int64_t evalIters = 200;
    uint64_t seed = 1337;
    std::string device = "auto"; // "cpu", "cuda", "cuda:N" or "auto"
    bool bf16Autocast = true; // on CUDA only
    // CPU only: model replicas that each take a slice of the batch on their
    // own thread with single-threaded kernels, their gradients summed in a
    // fixed order (deterministic). 0 = one per torch thread when dropout is 0
    // (dropout draws from one shared generator, so it keeps one replica).
    int64_t cpuReplicas = 0;
    // Keep only each block's input in the forward pass and recompute the
    // block in the backward (engine/checkpointing.h): less memory for one
    // more forward pass. Needs dropout 0.
    bool activationCheckpointing = false;
    // AdamW's moments kept in 8 bits (engine/adamw8bit.h): 2 bytes a
    // parameter instead of 8. On the CPU the raw-pointer kernel, on other
    // devices the same update from tensor operations (engine/
    // adamw8bit_tensors.h; int8MomentTensors takes it on the CPU too). Such
    // a trainer cannot save its state (saveState refuses).
    bool int8Moments = false;
    // The update a GPU runs (engine/fused_update.h: the norm, clipping and
    // the non-finite skip as device tensors, nothing read inside the step)
    // on any device. On for CUDA unless the moments are 8-bit or on the
    // host (those run their own update); on a CPU it replaces the CPU's own
    // kernels and replicas (tests check the GPU's path there).
    bool syncFreeUpdate = false;
    bool int8MomentTensors = false;
    // bf16 weights and gradients on the device, the fp32 master and 8-bit
    // moments in host RAM (engine/host_master.h): implies 8-bit moments;
    // one replica, no data parallel; cannot save its state.
    bool bf16HostMaster = false;
};

struct StepReport {
    int64_t step = 0; // steps completed after this one
    double loss = 0; // mean over the step's micro-batches (and ranks)
    double learningRate = 0;
    double gradNorm = 0; // before clipping
    double stepMs = 0;
    // Where stepMs went: drawing the batch and moving it to the device, the
    // forward and backward passes, and the update (gradient all-reduce,
    // clipping, AdamW). On CUDA these are host times of asynchronous work;
    // only stepMs waits for the device.
    double dataMs = 0;
    double forwardBackwardMs = 0;
    double updateMs = 0;
    // The device's own time for the step, from timing events on its stream
    // (CUDA with libtorch 2.x); 0 where none time (the CPU, libtorch 1.13).
    double deviceMs = 0;
    double tokensPerSecond = 0; // all ranks
    int64_t tokensSeen = 0; // all ranks, since step 0
};

struct EvalReport {
    int64_t step = 0;
    double trainLoss = 0;
    double valLoss = 0;
};

struct TrainData {
    std::unique_ptr<BatchSource> train;
    std::unique_ptr<BatchSource> trainEval; // optional: a second stream for train-loss estimates
    std::unique_ptr<BatchSource> val; // optional
};

class Trainer {
public:
    // Builds the model from options.model, seeded with options.seed.
    static Result<std::unique_ptr<Trainer>> create(
        TrainOptions options, TrainData data, std::shared_ptr<DataParallel> parallel = nullptr);
    ~Trainer();

    // learningRate: this step's rate instead of the schedule's (a caller
    // with a schedule of its own: DiLoCo's inner steps follow the project's).
    StepReport step(std::optional<double> learningRate = std::nullopt);
    // Mean loss over `iters` batches from the source, starting at its position 0
    // each time so evaluations are comparable. Under data parallel the ranks
    // share the batches' rows, as in step(); every rank gets the mean.
    double evaluate(BatchSource& source, int64_t iters);
    EvalReport evaluateAll();

    struct Callbacks {
        std::function<void(const StepReport&)> onStep;
        std::function<void(const EvalReport&)> onEval;
        // Called on the training thread before each step. It may block: a
        // caller's pause holds training there, at a step boundary. false ends
        // the run (successfully) before the step.
        std::function<bool()> beforeStep;
    };
    // Runs until maxIters or until beforeStep says stop; evaluates every
    // evalInterval and at the end of maxIters.
    Status run(const Callbacks& callbacks);

    // The complete training state: model, optimizer, step, data positions,
    // RNG, options. See engine/train_state.h for the file format.
    Status saveState(const std::filesystem::path& file) const;
    Status loadState(const std::filesystem::path& file);

    // Frees every gradient buffer (the next step writes them afresh): a
    // caller that keeps the trainer between runs holds only the weights and
    // the optimizer's state meanwhile.
    void releaseGradients();

    Gpt& model() { return m_model; }
    torch::optim::AdamW& optimizer() { return *m_optimizer; }
    const TrainOptions& options() const { return m_options; }
    int64_t stepCount() const { return m_step; }
    int64_t tokensSeen() const { return m_tokensSeen; }
    torch::Device device() const { return m_device; }
    // How the update runs here, in words (for the program's log).
    std::string updateKernelName() const;
    TrainData& data() { return m_data; }
    // The fp32 master weights when options.bf16HostMaster, else null: what
    // a task reads its weights into and writes out (then toDevice()).
    HostMaster* hostMaster() { return m_hostMaster.get(); }

private:
    Trainer(TrainOptions options, TrainData data, std::shared_ptr<DataParallel> parallel, torch::Device device,
        int64_t replicas);
    // One micro-batch: forward and backward of rows [0, b) of x/y; returns the
    // loss, a 0-dim tensor on the device not yet read (float64).
    torch::Tensor microStep(const torch::Tensor& x, const torch::Tensor& y, double lossScale);
    // The same on the CPU replicas, each on its share of the rows; the first
    // micro-batch of a step first copies the primary's weights to the others.
    torch::Tensor replicatedMicroStep(const torch::Tensor& x, const torch::Tensor& y, double lossScale, bool first);
    // Averages gradients over ranks, clips them and runs AdamW; returns the
    // gradient norm before clipping, as a 0-dim tensor (on CUDA not yet
    // read). The replicated one first sums the replicas' gradients into the
    // primary's, and splits every pass over the weights between the team's
    // threads.
    torch::Tensor update();
    torch::Tensor replicatedUpdate();
    std::vector<Gpt*> allModels();

    TrainOptions m_options;
    TrainData m_data;
    std::shared_ptr<DataParallel> m_parallel;
    torch::Device m_device;
    Gpt m_model{nullptr};
    std::unique_ptr<torch::optim::AdamW> m_optimizer;
    int64_t m_step = 0;
    int64_t m_tokensSeen = 0;
    std::vector<int64_t> m_xBuffer;
    std::vector<int64_t> m_yBuffer;
    // Besides m_model, when cpuReplicas > 1. Their weights are m_model's
    // (the same storage: they only read them, between two updates); each
    // has its own gradients.
    std::vector<Gpt> m_replicas;
    std::unique_ptr<ThreadTeam> m_team;
    std::unique_ptr<AdamW8bit> m_adamW8bit; // when options.int8Moments, on the CPU
    std::unique_ptr<AdamW8bitTensors> m_adamW8bitTensors; // int8Moments elsewhere
    std::unique_ptr<HostMaster> m_hostMaster; // when options.bf16HostMaster
    // On CUDA (unless the moments are 8-bit or on the host), or when
    // options.syncFreeUpdate.
    std::unique_ptr<SyncFreeAdamW> m_syncFree;
    void createInt8Moments();
};

// "auto" picks CUDA when available. Errors on an unknown or absent device.
Result<torch::Device> resolveDevice(const std::string& name);

} // namespace crowdtrain::engine
