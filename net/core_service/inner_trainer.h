#pragma once

// The inner loop of DiLoCo on a volunteer, inside the training core
// (crowdtrain-core, core_service.h): from theta_v, H AdamW steps of the
// engine's Trainer over a task's windows, then the local weights. One
// Trainer lives across tasks so that AdamW's moments carry over (as in
// DiLoCo, where each worker keeps its inner optimizer); each task only loads
// theta_v into the model and swaps the data source. The learning rate is the
// project's schedule at the global inner step (step i of a task from version
// v is v * H + i: constant, or a cosine decay to minLr over lrDecayIters),
// capped by a warmup over the first warmupIters steps this volunteer takes
// (its AdamW moments start empty, whatever the project's age).
// Dropout is 0 (pseudo-gradients must not depend on a dropout stream).
//
// With two devices or more (a volunteer's GPUs) each task trains on all of
// them as one team (engine/parallel/device_team.h): each device takes an
// even share of the batch's rows, data parallel or ZeRO-3 as the memory
// plan chose, so the steps match one device's up to the order of sums.
//
// Thread-safety: run() may be called from any one thread at a time (the
// agent's training thread); it sets that thread's torch thread count first.

#include "core/result.h"
#include "engine/batch_source.h"
#include "engine/gpt_config.h"
#include "engine/model_io.h"
#include "engine/trainer.h"
#include "net/core_link/core_messages.h"
#include "net/wire/messages_common.h"

#include <atomic>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace crowdtrain::engine::parallel {
class DeviceTeam;
}

namespace crowdtrain::coreservice {

using corelink::TaskOutcome;
using corelink::TrainingDevices;

class InnerTrainer {
public:
    // torchThreads: the intra-op threads to use in the training thread (0 = leave as is).
    // microBatch: sequences per forward/backward pass, a divisor of the
    // task's batch, which gradient accumulation keeps (0 = the whole batch).
    InnerTrainer(engine::GptConfig model, net::InnerSettings inner, std::string device, int torchThreads,
        int64_t microBatch = 0);
    // torchThreads: shared out between a team's ranks.
    InnerTrainer(engine::GptConfig model, net::InnerSettings inner, TrainingDevices devices, int torchThreads);
    ~InnerTrainer();

    // The wire manifest of the model this trainer builds (names and shapes in
    // flat-vector order), to compare with the coordinator's.
    static std::vector<net::TensorSpec> wireManifestOf(const engine::GptConfig& model);

    // The rate of inner step `ownStep` of this volunteer at the project's
    // global inner step `globalStep`.
    static double learningRate(const net::InnerSettings& inner, uint64_t ownStep, uint64_t globalStep);

    // Loads theta into the model and runs `steps` inner steps on `source`,
    // the first of them global inner step `firstGlobalStep`; stops early,
    // after at least one step, once wrapUp is set (the round is closing:
    // the outcome then holds the steps done).
    // Errors: "cancelled" (abort was set; checked between steps), "non_finite"
    // (the local weights are not all finite), "bad_size", "training_failed"
    // (libtorch threw), the Trainer's option errors.
    Result<TaskOutcome> run(const std::vector<float>& theta, std::unique_ptr<engine::BatchSource> source,
        uint64_t steps, uint64_t firstGlobalStep, const std::atomic<bool>& abort, const std::atomic<bool>& wrapUp,
        const std::function<void(const engine::StepReport&)>& onStep);

    // The same with theta read from `thetaFile` and the local weights
    // written to `localFile` (each P = `elements` float32): on one device
    // straight between the files and the model, so that the core holds no
    // flat copy of the weights; a team goes through one flat vector. The
    // outcome's `local` stays empty. Also "bad_size" (the theta file does
    // not hold `elements` floats) and "io_error".
    Result<TaskOutcome> runFiles(const std::filesystem::path& thetaFile, uint64_t elements,
        const std::filesystem::path& localFile, std::unique_ptr<engine::BatchSource> source, uint64_t steps,
        uint64_t firstGlobalStep, const std::atomic<bool>& abort, const std::atomic<bool>& wrapUp,
        const std::function<void(const engine::StepReport&)>& onStep);

    int64_t innerStepsTaken() const;
    int64_t microBatch() const { return m_options.batchSize; }
    // The device training runs on ("cpu", "cuda:0"; a team's joined by
    // commas: "cuda:0,cuda:1"); "" before the first run.
    std::string deviceName() const;
    // How a team shares the work: "data_parallel", "sharded" (ZeRO-3); "" on one device.
    std::string parallelMode() const;
    bool sameSettings(const engine::GptConfig& model, const net::InnerSettings& inner) const;

private:
    // How a task's weights come in (into the model or team) and go out
    // (into the outcome or a file).
    using Load = std::function<Status()>;
    using Finish = std::function<Status(TaskOutcome&)>;
    Result<TaskOutcome> guarded(const Load& load, std::unique_ptr<engine::BatchSource> source, uint64_t steps,
        uint64_t firstGlobalStep, const std::atomic<bool>& abort, const std::atomic<bool>& wrapUp,
        const std::function<void(const engine::StepReport&)>& onStep, const Finish& finish);
    Result<TaskOutcome> runUnguarded(const Load& load, std::unique_ptr<engine::BatchSource> source, uint64_t steps,
        uint64_t firstGlobalStep, const std::atomic<bool>& abort, const std::atomic<bool>& wrapUp,
        const std::function<void(const engine::StepReport&)>& onStep, const Finish& finish);

    // Builds the trainer or team at the first task, else gives it the source.
    Status prepare(std::unique_ptr<engine::BatchSource> source);
    Status assign(const std::vector<float>& theta);
    engine::StepReport step(double learningRate);
    std::vector<float> local();
    // The one trainer's weights as the flat vector orders them: the fp32
    // master when the device holds bf16 (engine/host_master.h), else the
    // model's own; after writing them, weightsChanged() updates the device.
    engine::NamedParameters weights();
    void weightsChanged();
    int64_t rowsPerStep() const;

    engine::TrainOptions m_options;
    net::InnerSettings m_inner;
    int m_torchThreads;
    TrainingDevices m_devices;
    std::unique_ptr<engine::Trainer> m_trainer;
    std::unique_ptr<engine::parallel::DeviceTeam> m_team;
};

} // namespace crowdtrain::coreservice
