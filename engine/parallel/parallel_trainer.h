#pragma once

// Trains a GPT across the ranks of a Mesh in any of: data parallel with ZeRO
// stage 0-3 (zero.h), Megatron tensor parallel (tensor_parallel.h) with
// ZeRO over its data-parallel groups, or a 1F1B pipeline (pipeline.h); each
// with optional activation checkpointing and bf16 autocast. Every rank
// builds the same model from the seed and draws the same global batch
// (engine::Trainer's rule), so a run matches one process training the same
// global batch up to the order of floating-point sums. Checkpoints hold the
// whole model and AdamW state, so any layout resumes any other's. Every
// call is collective over the mesh. Used from the training thread only.

#include "core/result.h"
#include "engine/batch_source.h"
#include "engine/model_io.h"
#include "engine/parallel/mesh.h"
#include "engine/parallel/stage_runner.h"
#include "engine/parallel/staged_model.h"
#include "engine/parallel/zero.h"
#include "engine/trainer.h"

#include <filesystem>

namespace crowdtrain::engine::parallel {

struct ParallelOptions {
    int zeroStage = 0; // 0 = plain data parallel
    bool activationCheckpointing = false;
    bool bf16 = false;
};

struct ParallelStepReport {
    int64_t step = 0;
    double loss = 0;
    double learningRate = 0;
    double gradNorm = 0;
    double stepMs = 0;
    double tokensPerSecond = 0; // all ranks
    int64_t bytesSent = 0; // by this rank during the step
    double pipelineWaitMs = 0; // this stage's receive waits (pipeline only)
    double bubbleOnPaper = 0; // pipeline only

    // As engine::Trainer reports a step.
    StepReport common(int64_t tokensSeen) const
    {
        StepReport report;
        report.step = step;
        report.loss = loss;
        report.learningRate = learningRate;
        report.gradNorm = gradNorm;
        report.stepMs = stepMs;
        report.forwardBackwardMs = stepMs;
        report.tokensPerSecond = tokensPerSecond;
        report.tokensSeen = tokensSeen;
        return report;
    }
};

class ParallelTrainer {
public:
    // options.batchSize: rows per micro-batch per data-parallel rank;
    // gradAccumulationSteps: micro-batches per step (the pipeline's M).
    // The Trainer's cpuReplicas and bf16Autocast are not used here.
    static Result<std::unique_ptr<ParallelTrainer>> create(
        TrainOptions options, ParallelOptions parallel, TrainData data, std::shared_ptr<Mesh> mesh);

    // learningRate: this step's rate instead of the schedule's (as
    // Trainer::step).
    ParallelStepReport step(std::optional<double> learningRate = std::nullopt);
    // The next step's gradients, averaged over the ranks, by whole-model
    // name, without the update (for checks; the data moves on).
    NamedParameters computeGradients();
    double evaluate(BatchSource& source, int64_t iters);
    // Train (trainEval) and validation losses over evalIters batches each.
    EvalReport evaluateAll();
    // As Trainer::run; beforeStep must answer alike on every rank (a step is
    // collective).
    Status run(const Trainer::Callbacks& callbacks);

    // The whole model and AdamW moments by name, on every rank (collective).
    NamedParameters wholeParameters();
    // One file written by rank 0; read by every rank of any layout.
    Status saveState(const std::filesystem::path& file);
    Status loadState(const std::filesystem::path& file);
    Status exportHuggingFace(const std::filesystem::path& dir);
    // Sets the whole model's values (every parameter by name, whole shapes,
    // on any device), keeping AdamW's moments and step count. Every rank
    // passes the same values; not collective. "bad_size" when a name is
    // missing or a shape differs; nothing changes then.
    Status assignParameters(const std::map<std::string, torch::Tensor>& whole);

    int64_t stepCount() const { return m_step; }
    int64_t tokensSeen() const { return m_tokensSeen; }
    const MemoryMeter& memory() const { return m_meter; }
    Mesh& mesh() { return *m_mesh; }
    const TrainOptions& options() const { return m_options; }
    TrainData& data() { return m_data; }
    // Parameters this rank holds the state of (its model part, whole).
    int64_t localParameterCount() const { return m_localParameters; }

private:
    ParallelTrainer(TrainOptions options, ParallelOptions parallel, TrainData data, std::shared_ptr<Mesh> mesh);
    // The step's micro-batch `micro`: this data-parallel rank's rows.
    std::pair<torch::Tensor, torch::Tensor> nextBatch(BatchSource& source);
    // Forward and backward of a step's micro-batches; returns the mean loss.
    double accumulateGradients(ParallelStepReport& report);
    std::map<std::string, torch::Tensor> wholeState(ZeroOptimizer::State which);
    int ownerStage(const std::string& name) const;

    TrainOptions m_options;
    ParallelOptions m_parallel;
    TrainData m_data;
    std::shared_ptr<Mesh> m_mesh;
    torch::Device m_device = torch::kCPU;
    int m_dpRank = 0;
    int m_dpSize = 1;
    StageLayout m_layout;
    std::vector<StageLayout> m_layouts; // every stage's
    MemoryMeter m_meter;
    std::unique_ptr<StagedModel> m_model;
    std::unique_ptr<ZeroOptimizer> m_zero;
    std::unique_ptr<StageRunner> m_runner;
    torch::Tensor m_tiedEmbedding; // the pipeline's first and last stages
    int64_t m_localParameters = 0;
    int64_t m_step = 0;
    int64_t m_tokensSeen = 0;
    std::vector<int64_t> m_xBuffer, m_yBuffer;
};

} // namespace crowdtrain::engine::parallel
