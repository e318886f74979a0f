#include "app/train_parallel.h"

#include "engine/parallel/parallel_trainer.h"

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

namespace crowdtrain::app {

using namespace crowdtrain::engine;
using namespace crowdtrain::engine::parallel;

namespace {

int fail(const std::string& message)
{
    std::cerr << "crowdtrain-train: " << message << '\n';
    return 1;
}

} // namespace

void declareParallelOptions(Args& a)
{
    a.option("zero",
        "ZeRO stage over the data-parallel ranks: 0 (plain), 1 (optimizer state sharded), "
        "2 (+ gradients), 3 (+ parameters)",
        "0");
    a.option("tensor-parallel", "Megatron tensor-parallel ranks (divides n_head and vocab_size)", "1");
    a.option("pipeline-parallel", "pipeline stages (1F1B over --gradient-accumulation-steps micro-batches)", "1");
    a.flag("activation-checkpointing", "keep only each block's input; recompute the block in the backward");
    a.option("dtype", "fp32, bf16 (autocast, fp32 master weights) or auto (bf16 on CUDA only)", "auto");
}

bool wantsParallelTrainer(const Args& a)
{
    return a.has("zero") || a.integer("tensor-parallel") > 1 || a.integer("pipeline-parallel") > 1
        || a.isSet("activation-checkpointing") || a.value("dtype") == "bf16";
}

int trainParallel(const Args& a, TrainOptions options, TrainData data, int rank, int nproc,
    const std::function<std::optional<std::string>()>& waitForRanks)
{
    const bool leader = rank == 0;
    if (a.has("init-from"))
        return fail("--init-from is not supported with the parallel options (resume a parallel checkpoint instead)");
    const std::string dtype = a.value("dtype");
    if (dtype != "fp32" && dtype != "bf16" && dtype != "auto")
        return fail("--dtype is fp32, bf16 or auto, not '" + dtype + "'");
    auto device = resolveDevice(options.device);
    if (!device)
        return fail(device.error().message);
    if (device->is_cuda())
        device = torch::Device(torch::kCUDA, c10::DeviceIndex((device->has_index() ? device->index() : 0) + rank));
    options.device = device->str();

    MeshOptions meshOptions;
    meshOptions.rank = rank;
    meshOptions.worldSize = nproc;
    meshOptions.tensorParallel = int(a.integer("tensor-parallel"));
    meshOptions.pipelineParallel = int(a.integer("pipeline-parallel"));
    meshOptions.port = uint16_t(a.integer("master-port"));
    meshOptions.device = *device;
    auto mesh = Mesh::create(meshOptions);
    if (!mesh)
        return fail(mesh.error().message);
    ParallelOptions parallel;
    parallel.zeroStage = int(a.integer("zero"));
    parallel.activationCheckpointing = a.isSet("activation-checkpointing");
    parallel.bf16 = dtype == "bf16" || (dtype == "auto" && device->is_cuda());
    auto created = ParallelTrainer::create(options, parallel, std::move(data), *mesh);
    if (!created)
        return fail(created.error().message);
    ParallelTrainer& trainer = **created;
    if (a.has("resume"))
        if (Status loaded = trainer.loadState(a.value("resume")); !loaded)
            return fail(loaded.error().message);
    if (leader) {
        const int tp = meshOptions.tensorParallel, pp = meshOptions.pipelineParallel;
        std::fprintf(stderr,
            "parallel: %d ranks = %d pipeline x %d data (ZeRO-%d) x %d tensor; %s%s; %lld parameters on rank 0\n",
            nproc, pp, nproc / (tp * pp), parallel.zeroStage, tp, parallel.bf16 ? "bf16 autocast" : "fp32",
            parallel.activationCheckpointing ? ", activation checkpointing" : "",
            static_cast<long long>(trainer.localParameterCount()));
    }

    const int64_t logInterval = std::max<int64_t>(1, a.integer("log-interval"));
    double stepMs = 0, bytes = 0, waitMs = 0, bubble = 0, tokensPerSecond = 0;
    int64_t steps = 0;
    EvalReport lastEval;
    Trainer::Callbacks callbacks;
    callbacks.onStep = [&](const StepReport& r) {
        ++steps;
        stepMs += r.stepMs;
        tokensPerSecond += r.tokensPerSecond;
        if (leader && (r.step % logInterval == 0 || r.step == 1))
            std::printf("step %lld | loss %.4f | lr %.2e | %.0f tok/s | %.1f ms\n", (long long)r.step, r.loss,
                r.learningRate, r.tokensPerSecond, r.stepMs);
    };
    callbacks.onEval = [&](const EvalReport& e) {
        lastEval = e;
        if (leader)
            std::printf(
                "eval step %lld | train loss %.4f | val loss %.4f\n", (long long)e.step, e.trainLoss, e.valLoss);
        std::fflush(stdout);
        if (a.has("checkpoint"))
            if (Status saved = trainer.saveState(a.value("checkpoint")); !saved)
                std::fprintf(stderr, "crowdtrain-train: %s\n", saved.error().message.c_str());
    };
    // Steps one by one to read the parallel figures of each.
    try {
        while (trainer.stepCount() < options.maxIters) {
            const ParallelStepReport r = trainer.step();
            bytes += double(r.bytesSent);
            waitMs += r.pipelineWaitMs;
            bubble = r.bubbleOnPaper;
            StepReport report;
            report.step = r.step;
            report.loss = r.loss;
            report.learningRate = r.learningRate;
            report.stepMs = r.stepMs;
            report.tokensPerSecond = r.tokensPerSecond;
            callbacks.onStep(report);
            const bool last = trainer.stepCount() == options.maxIters;
            if ((options.evalInterval > 0 && r.step % options.evalInterval == 0) || last) {
                callbacks.onEval(trainer.evaluateAll());
            }
        }
    } catch (const std::exception& e) {
        return fail(e.what());
    }
    if (a.has("export"))
        if (Status exported = trainer.exportHuggingFace(a.value("export")); !exported)
            return fail(exported.error().message);
    if (auto failed = waitForRanks())
        return fail(*failed);
    if (leader) {
        const double n = double(std::max<int64_t>(steps, 1));
        const nlohmann::json summary = {
            {"final_train_loss", lastEval.trainLoss},
            {"final_val_loss", lastEval.valLoss},
            {"tokens_per_second", tokensPerSecond / n},
            {"steps", trainer.stepCount()},
            {"device", options.device},
            {"state_bytes_peak_rank0", trainer.memory().peak()},
            {"parameters_rank0", trainer.localParameterCount()},
            {"bytes_sent_per_step_rank0", bytes / n},
            {"pipeline_bubble_on_paper", bubble},
            {"pipeline_wait_ms_per_step_rank0", waitMs / n},
            {"step_ms", stepMs / n},
        };
        std::printf("%s\n", summary.dump().c_str());
    }
    return 0;
}

} // namespace crowdtrain::app
