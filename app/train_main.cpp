// crowdtrain-train: train a model alone on this machine from prepared shards
// (a project host tries a configuration before launching a project), and
// `crowdtrain-train sample` to generate text from a checkpoint.
#include "app/args.h"
#include "app/train_memory.h"
#include "app/train_parallel.h"
#include "core/utf8.h"
#include "engine/batch_sampler.h"
#include "engine/cpu_runtime.h"
#include "engine/data_parallel.h"
#include "engine/data_set.h"
#include "engine/error_codes.h"
#include "engine/generate.h"
#include "engine/hf_gpt2.h"
#include "engine/model_io.h"
#include "engine/op_count.h"
#include "engine/tokenizer.h"
#include "engine/trainer.h"

#include <csignal>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace crowdtrain;
using namespace crowdtrain::engine;

namespace {

int fail(const std::string& message)
{
    std::cerr << "crowdtrain-train: " << message << '\n';
    return 1;
}

int64_t peakRssBytes()
{
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return int64_t(usage.ru_maxrss) * 1024;
}

void declareTrainOptions(app::Args& a)
{
    a.option("data", "prepared data folder (crowdtrain-prepare): shards + tokenizer/");
    a.option("model", "start from a named config: tiny, gpt2, gpt2-medium, gpt2-large, gpt2-xl");
    a.option("init-from", "start from a Hugging Face GPT-2 folder (model.safetensors + config.json)");
    a.integerOption("n-layer", "transformer blocks", "6");
    a.integerOption("n-head", "attention heads", "6");
    a.integerOption("n-embd", "embedding width", "384");
    a.integerOption("block-size", "context length in tokens", "256");
    a.integerOption("vocab-size", "vocabulary size (default: the tokenizer's)");
    a.numberOption("dropout", "dropout probability", "0.0");
    a.integerOption("batch-size", "sequences per micro-step (per process)", "12");
    a.integerOption("gradient-accumulation-steps", "micro-steps per optimizer step", "1");
    a.integerOption("max-iters", "optimizer steps", "2000");
    a.numberOption("learning-rate", "peak learning rate", "1e-3");
    a.numberOption("min-lr", "learning rate at the end of the decay", "1e-4");
    a.integerOption("warmup-iters", "linear warmup steps", "100");
    a.integerOption("lr-decay-iters", "step where cosine decay reaches min-lr", "2000");
    a.integerOption("decay-lr", "1 to warm up and decay, 0 for a constant rate", "1");
    a.numberOption("beta1", "AdamW beta1", "0.9");
    a.numberOption("beta2", "AdamW beta2", "0.99");
    a.numberOption("weight-decay", "AdamW weight decay (2-D weights only)", "0.1");
    a.numberOption("grad-clip", "clip the gradient norm (0 = off)", "1.0");
    a.integerOption("eval-interval", "steps between validation runs", "250");
    a.integerOption("eval-iters", "batches per validation run", "200");
    a.integerOption("log-interval", "steps between progress lines", "10");
    a.integerOption("seed", "random seed", "1337");
    a.option(
        "sampling", "training windows: tiles (every window of an epoch once, shuffled) or random (nanoGPT)", "tiles");
    a.integerOption("threads", "CPU threads (0 = all cores)", "0");
    a.option("device", "cpu, cuda, cuda:N or auto", "auto");
    a.integerOption("nproc", "local data-parallel processes (c10d: Gloo on CPU, NCCL on CUDA)", "1");
    a.integerOption("master-port", "rendezvous port for --nproc", "29512");
    a.integerOption("rank", "(internal) this process's rank under --nproc", "0");
    a.option("checkpoint", "write the training state here at each evaluation and at the end");
    a.option("resume", "resume from a training-state file");
    a.option("export", "at the end, export a Hugging Face GPT-2 folder here");
    a.flag("count-ops", "count ATen operators and mid-step host reads (item: a sync on CUDA) per training step");
    app::declareParallelOptions(a);
    app::declareMemoryOptions(a);
}

Result<GptConfig> modelConfig(const app::Args& a, const Tokenizer* tokenizer)
{
    GptConfig c;
    if (a.has("model")) {
        auto preset = gptConfigByName(a.value("model"));
        if (!preset)
            return preset.error();
        c = *preset;
    }
    auto pick = [&](const char* name, int64_t& field) {
        if (a.has(name) || !a.has("model"))
            field = a.integer(name);
    };
    pick("n-layer", c.nLayer);
    pick("n-head", c.nHead);
    pick("n-embd", c.nEmbd);
    pick("block-size", c.blockSize);
    c.dropout = a.number("dropout");
    if (a.has("vocab-size"))
        c.vocabSize = a.integer("vocab-size");
    else if (tokenizer)
        c.vocabSize = tokenizer->vocabSize();
    return c;
}

std::unique_ptr<BatchSource> samplerOver(
    const std::vector<TokenShard>& shards, int64_t blockSize, uint64_t seed, Sampling sampling, std::string& error)
{
    std::vector<ShardSlice> slices;
    for (const auto& shard : shards)
        slices.push_back({&shard, 0, shard.size()});
    auto sampler = BatchSampler::create(std::move(slices), blockSize, seed, sampling);
    if (!sampler) {
        error = sampler.error().message;
        return nullptr;
    }
    return std::make_unique<BatchSampler>(std::move(sampler).value());
}

// Ranks 1..n-1 of an --nproc run: copies of this process with --rank set.
// They die with the leader (PR_SET_PDEATHSIG), and a leader that fails
// stops them rather than leave them waiting at the rendezvous.
class RankProcesses {
public:
    RankProcesses() = default;
    RankProcesses(const RankProcesses&) = delete;
    RankProcesses& operator=(const RankProcesses&) = delete;
    ~RankProcesses()
    {
        for (pid_t pid : m_pids)
            kill(pid, SIGTERM);
        for (pid_t pid : m_pids)
            waitpid(pid, nullptr, 0);
    }

    void spawn(int nproc, char** argv)
    {
        std::vector<std::string> args;
        for (int i = 0; argv[i]; ++i)
            args.emplace_back(argv[i]);
        const pid_t leader = getpid();
        for (int rank = 1; rank < nproc; ++rank) {
            const pid_t pid = fork();
            if (pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGTERM);
                if (getppid() != leader)
                    _exit(1); // the leader is already gone
                std::vector<std::string> own = args;
                own.push_back("--rank");
                own.push_back(std::to_string(rank));
                std::vector<char*> raw;
                for (auto& s : own)
                    raw.push_back(s.data());
                raw.push_back(nullptr);
                execv("/proc/self/exe", raw.data());
                _exit(127);
            }
            if (pid > 0)
                m_pids.push_back(pid);
        }
    }

    // Waits for every rank; the message names the first that failed.
    std::optional<std::string> waitAll()
    {
        std::optional<std::string> failure;
        for (std::size_t i = 0; i < m_pids.size(); ++i) {
            int status = 0;
            waitpid(m_pids[i], &status, 0);
            if (!failure && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
                failure = "rank " + std::to_string(i + 1)
                    + (WIFSIGNALED(status) ? " was killed by signal " + std::to_string(WTERMSIG(status))
                                           : " exited with status " + std::to_string(WEXITSTATUS(status)));
        }
        m_pids.clear();
        return failure;
    }

private:
    std::vector<pid_t> m_pids;
};

// Under --nproc on CUDA each rank takes a GPU of its own: rank r trains on
// the r-th GPU from the one --device names (cuda:0 for cuda or auto).
Result<torch::Device> rankDevice(const std::string& name, int rank, int nproc)
{
    auto device = resolveDevice(name);
    if (!device || !device->is_cuda())
        return device;
    const int first = device->has_index() ? device->index() : 0;
    const int available = int(torch::cuda::device_count());
    if (first + nproc > available)
        return Error::make(errc::kNoDevice,
            "--nproc " + std::to_string(nproc) + " from " + device->str() + " needs " + std::to_string(first + nproc)
                + " CUDA devices, this machine has " + std::to_string(available));
    return torch::Device(torch::kCUDA, c10::DeviceIndex(first + rank));
}

// The mean step time of this run and where it went, for profiling a config.
nlohmann::json meanStepPhases(const StepReport& sums, int64_t steps)
{
    const double n = double(std::max<int64_t>(steps, 1));
    return {{"mean", sums.stepMs / n}, {"data", sums.dataMs / n}, {"forward_backward", sums.forwardBackwardMs / n},
        {"update", sums.updateMs / n}};
}

int train(const std::vector<std::string>& arguments, char** argv)
{
    app::Args a("crowdtrain-train", "train a GPT-2 model locally from prepared shards",
        "  crowdtrain-train --data DIR [options]          train\n"
        "  crowdtrain-train sample --checkpoint PATH ...  generate text (see sample --help)");
    declareTrainOptions(a);
    if (auto code = a.parse(arguments))
        return *code;
    if (!a.has("data"))
        return fail("--data DIR is required (see --help)");

    const int nproc = int(a.integer("nproc"));
    const int rank = int(a.integer("rank"));
    const bool leader = rank == 0;
    if (nproc < 1 || rank < 0 || rank >= nproc)
        return fail("--rank " + std::to_string(rank) + " is outside --nproc " + std::to_string(nproc));
    RankProcesses children;
    if (nproc > 1 && leader && !a.has("rank"))
        children.spawn(nproc, argv);

    int threads = int(a.integer("threads"));
    if (threads == 0 && nproc > 1)
        threads = std::max(1, int(std::thread::hardware_concurrency()) / nproc);
    configureCpuThreads(threads);

    auto data = openDataSet(a.value("data"));
    if (!data)
        return fail(data.error().message);
    std::unique_ptr<Tokenizer> tokenizer;
    if (data->tokenizerDir) {
        auto loaded = loadTokenizer(*data->tokenizerDir);
        if (!loaded)
            return fail(loaded.error().message);
        tokenizer = std::move(loaded).value();
    }

    TrainOptions options;
    std::optional<HfGpt2Weights> initial;
    if (a.has("init-from")) {
        auto weights = importHuggingFaceGpt2(a.value("init-from"));
        if (!weights)
            return fail(weights.error().message);
        initial = std::move(weights).value();
        options.model = initial->config;
    } else {
        auto config = modelConfig(a, tokenizer.get());
        if (!config)
            return fail(config.error().message);
        options.model = *config;
    }
    options.batchSize = a.integer("batch-size");
    options.gradAccumulationSteps = a.integer("gradient-accumulation-steps");
    options.maxIters = a.integer("max-iters");
    options.schedule = {a.number("learning-rate"), a.number("min-lr"), a.integer("warmup-iters"),
        a.integer("lr-decay-iters"), a.integer("decay-lr") != 0};
    options.beta1 = a.number("beta1");
    options.beta2 = a.number("beta2");
    options.weightDecay = a.number("weight-decay");
    options.gradClip = a.number("grad-clip");
    options.evalInterval = a.integer("eval-interval");
    options.evalIters = a.integer("eval-iters");
    options.seed = uint64_t(a.integer("seed"));
    options.device = a.value("device");

    const std::string sampling = a.value("sampling");
    if (sampling != "tiles" && sampling != "random")
        return fail("--sampling is tiles or random, not '" + sampling + "'");
    std::string error;
    TrainData trainData;
    const int64_t t = options.model.blockSize;
    trainData.train
        = samplerOver(data->train, t, options.seed, sampling == "tiles" ? Sampling::Tiles : Sampling::Random, error);
    if (!trainData.train)
        return fail("training shards: " + error);
    // Evaluation draws random windows: an unbiased estimate of the loss.
    trainData.trainEval = samplerOver(data->train, t, options.seed + 1, Sampling::Random, error);
    if (!data->val.empty()) {
        trainData.val = samplerOver(data->val, t, options.seed + 2, Sampling::Random, error);
        if (!trainData.val)
            return fail("validation shards: " + error);
    }

    if (app::wantsParallelTrainer(a))
        return app::trainParallel(a, options, std::move(trainData), rank, nproc, [&] { return children.waitAll(); });
    if (a.value("dtype") == "fp32")
        options.bf16Autocast = false;

    std::shared_ptr<DataParallel> parallel;
    if (nproc > 1) {
        auto device = rankDevice(options.device, rank, nproc);
        if (!device)
            return fail(device.error().message);
        options.device = device->str();
        DataParallelOptions dp;
        dp.rank = rank;
        dp.worldSize = nproc;
        dp.port = uint16_t(a.integer("master-port"));
        dp.device = *device;
        dp.backend = device->is_cuda() ? "nccl" : "gloo";
        auto created = DataParallel::create(dp);
        if (!created)
            return fail(created.error().message);
        parallel = *created;
    }

    auto memoryPlan = app::applyMemoryOptions(a, options);
    if (!memoryPlan)
        return fail(memoryPlan.error().message);
    if (leader && !memoryPlan->empty())
        std::fprintf(stderr, "memory plan: %s\n", memoryPlan->c_str());
    auto trainer = Trainer::create(options, std::move(trainData), parallel);
    if (!trainer)
        return fail(trainer.error().message);
    if (initial) {
        Gpt& model = (*trainer)->model();
        if (Status loaded = loadParameters(model, initial->parameters); !loaded)
            return fail(loaded.error().message);
    }
    if (a.has("resume")) {
        if (Status loaded = (*trainer)->loadState(a.value("resume")); !loaded)
            return fail(loaded.error().message);
    }

    if (leader) {
        const CpuRuntimeInfo cpu = cpuRuntimeInfo();
        std::fprintf(stderr,
            "model: %lld parameters (n_layer %lld, n_head %lld, n_embd %lld, block %lld, vocab %lld)\n",
            (long long)(*trainer)->model()->parameterCount(), (long long)options.model.nLayer,
            (long long)options.model.nHead, (long long)options.model.nEmbd, (long long)options.model.blockSize,
            (long long)options.model.vocabSize);
        std::fprintf(stderr, "device: %s, %d torch threads, BLAS %s (%s, %d threads)%s\n",
            (*trainer)->device().str().c_str(), cpu.torchThreads,
            cpu.blasCore.empty() ? "not OpenBLAS" : cpu.blasCore.c_str(), cpu.blasThreading.c_str(), cpu.blasThreads,
            cpu.reexecuted ? " [OPENBLAS_CORETYPE set by crowdtrain]" : "");
        const bool bf16 = (*trainer)->device().is_cuda() && options.bf16Autocast;
        std::fprintf(stderr, "attention: %s; update: %s\n",
            attentionKernelName(options.model, (*trainer)->device(), bf16).c_str(),
            (*trainer)->updateKernelName().c_str());
    }

    const int64_t logInterval = std::max<int64_t>(1, a.integer("log-interval"));
    double trainSeconds = 0;
    int64_t trainedTokens = 0;
    int64_t steps = 0;
    StepReport phaseSums; // this rank's step time and its phases, summed
    EvalReport lastEval;
    const auto wallStart = std::chrono::steady_clock::now();
    Trainer::Callbacks callbacks;
    // --count-ops: what the steps themselves run (evaluations left out).
    std::optional<OpCount> opCount;
    OpCounts inSteps, atStepStart;
    if (a.isSet("count-ops")) {
        opCount.emplace();
        callbacks.beforeStep = [&] {
            atStepStart = opCount->counts();
            return true;
        };
    }
    callbacks.onStep = [&](const StepReport& r) {
        if (opCount) {
            const OpCounts now = opCount->counts();
            inSteps.ops += now.ops - atStepStart.ops;
            inSteps.hostReads += now.hostReads - atStepStart.hostReads;
            inSteps.stepReads += now.stepReads - atStepStart.stepReads;
        }
        trainSeconds += r.stepMs / 1e3;
        trainedTokens += int64_t(r.tokensPerSecond * r.stepMs / 1e3 + 0.5);
        ++steps;
        phaseSums.stepMs += r.stepMs;
        phaseSums.dataMs += r.dataMs;
        phaseSums.forwardBackwardMs += r.forwardBackwardMs;
        phaseSums.updateMs += r.updateMs;
        if (leader && (r.step % logInterval == 0 || r.step == 1))
            std::printf("step %lld | loss %.4f | lr %.2e | %.0f tok/s | %.1f ms\n", (long long)r.step, r.loss,
                r.learningRate, r.tokensPerSecond, r.stepMs);
    };
    callbacks.onEval = [&](const EvalReport& e) {
        lastEval = e;
        if (!leader)
            return;
        std::printf("eval step %lld | train loss %.4f | val loss %.4f\n", (long long)e.step, e.trainLoss, e.valLoss);
        std::fflush(stdout);
        if (a.has("checkpoint")) {
            if (Status saved = (*trainer)->saveState(a.value("checkpoint")); !saved)
                std::fprintf(stderr, "crowdtrain-train: %s\n", saved.error().message.c_str());
        }
    };
    if (Status ran = (*trainer)->run(callbacks); !ran)
        return fail(ran.error().message);

    if (leader && a.has("export")) {
        Gpt& model = (*trainer)->model();
        if (Status exported = exportHuggingFaceGpt2(a.value("export"), options.model, namedParameters(model),
                {{"step", std::to_string((*trainer)->stepCount())}});
            !exported)
            return fail(exported.error().message);
    }
    if (auto failed = children.waitAll())
        return fail(*failed);
    if (leader) {
        const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wallStart).count();
        nlohmann::json summary = {
            {"final_train_loss", lastEval.trainLoss},
            {"final_val_loss", lastEval.valLoss},
            {"tokens_per_second", trainSeconds > 0 ? double(trainedTokens) / trainSeconds : 0.0},
            {"steps", (*trainer)->stepCount()},
            {"device", (*trainer)->device().str()},
            {"wall_seconds", wall},
            {"peak_rss_bytes", peakRssBytes()},
            {"step_ms", meanStepPhases(phaseSums, steps)},
            {"device_memory", app::deviceMemoryReport((*trainer)->device())},
        };
        if (opCount && steps > 0)
            summary["per_step"] = {{"aten_ops", double(inSteps.ops) / double(steps)},
                {"mid_step_host_reads", double(inSteps.hostReads) / double(steps)},
                {"end_of_step_reads", double(inSteps.stepReads) / double(steps)}};
        std::printf("%s\n", summary.dump().c_str());
    }
    return 0;
}

int sample(const std::vector<std::string>& arguments)
{
    app::Args a("crowdtrain-train sample", "generate text from a checkpoint",
        "  crowdtrain-train sample --checkpoint PATH --tokenizer-dir DIR --prompt TEXT");
    a.option("checkpoint", "a Hugging Face GPT-2 folder or a training-state file");
    a.option("tokenizer-dir", "tokenizer folder (encoder.json + vocab.bpe, or chars.json)");
    a.option("prompt", "text to continue", "\n");
    a.integerOption("max-new-tokens", "tokens to generate", "200");
    a.numberOption("temperature", "sampling temperature (0 = greedy)", "0.8");
    a.integerOption("top-k", "sample among the k most likely tokens (0 = all)", "200");
    a.integerOption("seed", "random seed", "1337");
    if (auto code = a.parse(arguments))
        return *code;
    if (!a.has("checkpoint") || !a.has("tokenizer-dir"))
        return fail("sample needs --checkpoint and --tokenizer-dir");
    configureCpuThreads(0);
    auto tokenizer = loadTokenizer(a.value("tokenizer-dir"));
    if (!tokenizer)
        return fail(tokenizer.error().message);
    auto model = loadModel(a.value("checkpoint"));
    if (!model)
        return fail(model.error().message);
    const auto promptIds = (*tokenizer)->encode(a.value("prompt"));
    if (promptIds.empty())
        return fail("the prompt encodes to no tokens");
    std::cout << a.value("prompt") << std::flush;
    SampleOptions options;
    options.maxNewTokens = a.integer("max-new-tokens");
    options.temperature = a.number("temperature");
    options.topK = a.integer("top-k");
    options.seed = uint64_t(a.integer("seed"));
    const Tokenizer& tok = **tokenizer;
    // A GPT-2 token may end inside a character; print whole characters only.
    core::Utf8Stream text;
    generate(*model, std::vector<int64_t>(promptIds.begin(), promptIds.end()), options, [&](int64_t id) {
        const int32_t one = int32_t(id);
        std::cout << text.push(tok.decode(std::span<const int32_t>(&one, 1))) << std::flush;
        return true;
    });
    std::cout << text.finish() << '\n';
    return 0;
}

} // namespace

int main(int argc, char** argv)
{
    prepareCpuRuntime(argv);
    auto arguments = app::argumentsOf(argc, argv);
    try {
        if (!arguments.empty() && arguments.front() == "sample")
            return sample(std::vector<std::string>(arguments.begin() + 1, arguments.end()));
        return train(arguments, argv);
    } catch (const std::exception& e) {
        return fail(e.what());
    }
}
