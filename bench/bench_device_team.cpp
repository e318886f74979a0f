// One machine's several devices training one batch (issue 27, item 8: a
// volunteer with two GPUs): one device against a DeviceTeam in data
// parallel and ZeRO-3, from the same weights on the same batches. Prints
// tokens/s, the training state each device holds and how far the team's
// weights end from the one device's.
//
//   build/ci/bin/bench_device_team [DEVICES [STEPS [LAYERS WIDTH]]]
//
// DEVICES: comma-separated, default cpu,cpu (two CPU ranks of one thread
// each, Gloo over loopback); cuda:0,cuda:1 on a machine with two GPUs
// (NCCL). The one-device row trains on the first device with all threads.
// Tokens are random ids from a fixed generator: a step's cost does not
// depend on them.
#include "engine/cpu_runtime.h"
#include "engine/diloco/flat_params.h"
#include "engine/parallel/device_team.h"
#include "engine/trainer.h"
#include "random_tokens.h"

#include <ATen/Parallel.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>

using namespace crowdtrain::engine;
using crowdtrain::bench::RandomTokens;

namespace {

std::vector<std::string> split(const std::string& text)
{
    std::vector<std::string> parts;
    std::stringstream in(text);
    for (std::string part; std::getline(in, part, ',');)
        parts.push_back(part);
    return parts;
}

double maxApart(const std::vector<float>& a, const std::vector<float>& b)
{
    double worst = 0;
    for (std::size_t i = 0; i < a.size() && i < b.size(); ++i)
        worst = std::max(worst, double(std::abs(a[i] - b[i])));
    return worst;
}

} // namespace

int main(int argc, char** argv)
{
    prepareCpuRuntime(argv);
    configureCpuThreads(0);
    const int threads = at::get_num_threads();
    const std::vector<std::string> devices = split(argc > 1 ? argv[1] : "cpu,cpu");
    const int steps = argc > 2 ? std::atoi(argv[2]) : 5;
    const int64_t rows = 8;

    TrainOptions options;
    options.model.nLayer = argc > 3 ? std::atoll(argv[3]) : 4;
    options.model.nEmbd = argc > 4 ? std::atoll(argv[4]) : 256;
    options.model.nHead = 8;
    options.model.blockSize = 128;
    options.model.vocabSize = 8192;
    options.model.dropout = 0;
    options.batchSize = rows;
    options.maxIters = steps + 1;
    options.device = devices.front();
    options.bf16Autocast = false;
    options.cpuReplicas = 1;
    TrainData data;
    data.train = std::make_unique<RandomTokens>(options.model.blockSize, options.model.vocabSize);
    auto single = Trainer::create(options, std::move(data));
    if (!single) {
        std::fprintf(stderr, "%s\n", single.error().message.c_str());
        return 1;
    }
    const std::vector<float> theta = crowdtrain::diloco::flatten((*single)->model());
    const int64_t parameters = int64_t(theta.size());
    const double tokensPerStep = double(rows * options.model.blockSize);

    auto timed = [&](auto&& step) {
        step(); // warm-up: allocations, process-group buffers
        const auto start = std::chrono::steady_clock::now();
        for (int i = 1; i < steps; ++i)
            step();
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        return tokensPerStep * (steps - 1) / seconds;
    };

    std::printf("model: %lld layers, %lld wide, block %lld, vocab %lld: %lld parameters; batch %lld x %lld tokens; "
                "%d steps (the first not timed); %d threads\n",
        static_cast<long long>(options.model.nLayer), static_cast<long long>(options.model.nEmbd),
        static_cast<long long>(options.model.blockSize), static_cast<long long>(options.model.vocabSize),
        static_cast<long long>(parameters), static_cast<long long>(rows),
        static_cast<long long>(options.model.blockSize), steps, threads);
    std::printf(
        "| layout | devices | tokens/s | state per device (MB) | bytes/parameter | max weight diff vs 1 device |\n");
    std::printf("| --- | --- | ---: | ---: | ---: | ---: |\n");
    const double singleRate = timed([&] { (*single)->step(1e-3); });
    const std::vector<float> reference = crowdtrain::diloco::flatten((*single)->model());
    std::printf("| one device | %s | %.0f | %.1f | 16.0 (formula) | 0 |\n", devices.front().c_str(), singleRate,
        16.0 * double(parameters) / 1e6);

    for (const int stage : {0, 3}) {
        TrainOptions perDevice = options;
        perDevice.batchSize = rows / int64_t(devices.size());
        crowdtrain::engine::parallel::DeviceTeamOptions team;
        team.devices = devices;
        team.zeroStage = stage;
        team.threadsPerRank = std::max(1, threads / int(devices.size()));
        auto made = crowdtrain::engine::parallel::DeviceTeam::create(
            perDevice, team, std::make_unique<RandomTokens>(options.model.blockSize, options.model.vocabSize));
        if (!made) {
            std::fprintf(stderr, "%s\n", made.error().message.c_str());
            return 1;
        }
        if (auto assigned = (*made)->assign(theta.data(), parameters); !assigned) {
            std::fprintf(stderr, "%s\n", assigned.error().message.c_str());
            return 1;
        }
        const double rate = timed([&] { (*made)->step(1e-3); });
        const double apart = maxApart((*made)->flatten(), reference);
        const int64_t state = (*made)->peakStateBytes();
        std::printf("| %s | %s | %.0f | %.1f | %.1f | %.2g |\n", stage == 0 ? "data parallel" : "ZeRO-3",
            argc > 1 ? argv[1] : "cpu,cpu", rate, double(state) / 1e6, double(state) / double(parameters), apart);
    }
    return 0;
}
