#pragma once

// The inner loop of DiLoCo on a volunteer: from theta_v, H AdamW steps of the
// engine's Trainer over a task's windows, then the local weights. One
// Trainer lives across tasks so that AdamW's moments carry over (as in
// DiLoCo, where each worker keeps its inner optimizer); each task only loads
// theta_v into the model and swaps the data source. The learning rate warms
// up over the first warmupIters inner steps this volunteer takes, then stays
// at learningRate (the coordinator does not announce a decay horizon).
// Dropout is 0 (pseudo-gradients must not depend on a dropout stream).
//
// Thread-safety: run() may be called from any one thread at a time (the
// agent's training thread); it sets that thread's torch thread count first.

#include "engine/batch_source.h"
#include "engine/gpt_config.h"
#include "engine/result.h"
#include "engine/trainer.h"
#include "net/wire/messages_common.h"

#include <atomic>
#include <functional>
#include <memory>
#include <vector>

namespace crowdtrain::volunteer {

struct TaskOutcome {
    std::vector<float> local; // theta after the inner steps, flat
    uint64_t steps = 0;
    uint64_t tokens = 0; // steps * batch * block
    double meanLoss = 0;
    double lastLoss = 0;
    double computeMs = 0; // sum of the steps' times
};

class InnerTrainer {
public:
    // torchThreads: the intra-op threads to use in the training thread (0 = leave as is).
    InnerTrainer(engine::GptConfig model, net::InnerSettings inner, std::string device, int torchThreads);
    ~InnerTrainer();

    // The wire manifest of the model this trainer builds (names and shapes in
    // flat-vector order), to compare with the coordinator's.
    static std::vector<net::TensorSpec> wireManifestOf(const engine::GptConfig& model);

    // Loads theta into the model and runs `steps` inner steps on `source`.
    // Errors: "cancelled" (abort was set; checked between steps), "non_finite"
    // (the local weights are not all finite), "bad_size", "train_failed"
    // (libtorch threw), the Trainer's option errors.
    Result<TaskOutcome> run(const std::vector<float>& theta, std::unique_ptr<engine::BatchSource> source,
        uint64_t steps, const std::atomic<bool>& abort, const std::function<void(const engine::StepReport&)>& onStep);

    int64_t innerStepsTaken() const;
    bool sameSettings(const engine::GptConfig& model, const net::InnerSettings& inner) const;

private:
    Result<TaskOutcome> runUnguarded(const std::vector<float>& theta, std::unique_ptr<engine::BatchSource> source,
        uint64_t steps, const std::atomic<bool>& abort, const std::function<void(const engine::StepReport&)>& onStep);

    engine::TrainOptions m_options;
    net::InnerSettings m_inner;
    int m_torchThreads;
    std::unique_ptr<engine::Trainer> m_trainer;
};

} // namespace crowdtrain::volunteer
