// One volunteer's training core on a real GPT-2 task, as the daemon drives
// it (docs/protocol.md §13): crowdtrain-core makes theta_0 from a seed
// ("init"), then trains TASKS tasks of STEPS inner steps each on windows of
// a prepared data folder ("train": theta file in, local weights file out).
// Prints the core's peak RSS (VmHWM) after init and after each task, in
// bytes per parameter (issue 41, item 3). Run it under /usr/bin/time -v:
// the core is this program's child, so "Maximum resident set size" is the
// larger of the two (this program holds a few MB).
//
//   bench_core_memory DATA_DIR [PRESET] [BLOCK] [BATCH] [STEPS] [TASKS] [THREADS]
//
// Defaults: gpt2, block 128, batch 2, 2 steps, 2 tasks, 1 thread.
// CROWDTRAIN_CORE names the core binary (default: beside this program).
#include "engine/batch_sampler.h"
#include "engine/data_set.h"
#include "engine/gpt_config.h"
#include "net/core_link/core_process.h"
#include "net/core_link/windows_file.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <unistd.h>

using namespace crowdtrain;

namespace {

// VmHWM of a live process, in bytes (0 when unreadable).
uint64_t peakRss(pid_t pid)
{
    std::ifstream status("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(status, line))
        if (line.rfind("VmHWM:", 0) == 0)
            return std::strtoull(line.c_str() + 6, nullptr, 10) * 1024;
    return 0;
}

int fail(const std::string& what)
{
    std::fprintf(stderr, "bench_core_memory: %s\n", what.c_str());
    return 1;
}

} // namespace

int main(int argc, char** argv)
{
    if (argc < 2)
        return fail("usage: bench_core_memory DATA_DIR [PRESET] [BLOCK] [BATCH] [STEPS] [TASKS] [THREADS]");
    const std::filesystem::path dataDir = argv[1];
    const std::string preset = argc > 2 ? argv[2] : "gpt2";
    const int64_t block = argc > 3 ? std::atoll(argv[3]) : 128;
    const int64_t batch = argc > 4 ? std::atoll(argv[4]) : 2;
    const uint64_t steps = argc > 5 ? std::strtoull(argv[5], nullptr, 10) : 2;
    const int tasks = argc > 6 ? std::atoi(argv[6]) : 2;
    const uint64_t threads = argc > 7 ? std::strtoull(argv[7], nullptr, 10) : 1;

    auto config = engine::gptConfigByName(preset);
    if (!config)
        return fail("unknown preset " + preset);
    config->blockSize = block;
    net::ModelConfig model{uint64_t(config->nLayer), uint64_t(config->nHead), uint64_t(config->nEmbd), uint64_t(block),
        uint64_t(config->vocabSize)};

    const std::filesystem::path work
        = std::filesystem::temp_directory_path() / ("bench-core-memory-" + std::to_string(::getpid()));
    std::filesystem::create_directories(work);
    auto data = engine::openDataSet(dataDir);
    if (!data)
        return fail(data.error().message);
    auto sampler = engine::BatchSampler::create(engine::wholeShards(data->train), block, 1);
    if (!sampler)
        return fail(sampler.error().message);
    const auto windows = work / "windows.bin";
    if (Status wrote = corelink::writeWindowsFile(windows, *sampler, batch, uint64_t(batch) * steps); !wrote)
        return fail(wrote.error().message);

    auto core = corelink::CoreProcess::start({});
    if (!core)
        return fail(core.error().message);
    corelink::CoreChannel& channel = (*core)->channel();
    const pid_t pid = (*core)->pid();

    corelink::InitRequest init{model, 1, (work / "theta.f32").string()};
    if (!channel.send(init.encode()))
        return fail("init not sent");
    auto initialized = channel.receive(-1);
    if (!initialized || initialized->type != corelink::type::kInitialized)
        return fail("init failed");
    const uint64_t parameters = std::filesystem::file_size(work / "theta.f32") / 4;
    const double p = double(parameters);
    std::printf("| core (%s, block %lld, batch %lld, %llu threads) | peak RSS (MB) | bytes per parameter |\n",
        preset.c_str(), static_cast<long long>(block), static_cast<long long>(batch),
        static_cast<unsigned long long>(threads));
    std::printf("|---|---:|---:|\n");
    std::printf("| after init (P = %llu) | %.0f | %.1f |\n", static_cast<unsigned long long>(parameters),
        double(peakRss(pid)) / 1e6, double(peakRss(pid)) / p);

    for (int task = 0; task < tasks; ++task) {
        corelink::TrainRequest train;
        train.taskId = uint64_t(task + 1);
        train.model = model;
        train.inner = {.steps = steps,
            .batchSize = uint64_t(batch),
            .blockSize = uint64_t(block),
            .learningRate = 3e-4,
            .minLr = 3e-5,
            .warmupIters = 2,
            .lrDecayIters = 0,
            .beta1 = 0.9,
            .beta2 = 0.95,
            .weightDecay = 0.1,
            .gradClip = 1.0};
        train.threads = threads;
        train.thetaFile = (work / "theta.f32").string();
        train.elements = parameters;
        train.windowsFile = windows.string();
        train.steps = steps;
        train.firstGlobalStep = uint64_t(task) * steps;
        train.localFile = (work / "local.f32").string();
        if (!channel.send(train.encode()))
            return fail("train not sent");
        double loss = 0;
        while (true) {
            auto frame = channel.receive(-1);
            if (!frame)
                return fail("the core went away: " + (*core)->ended());
            if (frame->type == corelink::type::kStep) {
                if (auto step = corelink::StepDone::decode(*frame))
                    loss = step->loss;
                if (!channel.send(corelink::message(corelink::type::kGo)))
                    return fail("go not sent");
            } else if (frame->type == corelink::type::kDone) {
                break;
            } else if (frame->type == corelink::type::kError) {
                return fail("train: " + corelink::decodeError(*frame).message);
            }
        }
        std::printf("| after task %d (%llu steps, loss %.3f) | %.0f | %.1f |\n", task + 1,
            static_cast<unsigned long long>(steps), loss, double(peakRss(pid)) / 1e6, double(peakRss(pid)) / p);
        std::filesystem::rename(work / "local.f32", work / "theta.f32");
    }
    (*core)->stop();
    std::filesystem::remove_all(work);
    return 0;
}
