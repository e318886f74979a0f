// gpt2 (124M) training steps on CPU: tokens/s and peak RSS for B=4, T=256.
//
//   build/release/bin/bench_gpt2_cpu [STEPS]
//
// Tokens are uniform random ids: the cost of a step does not depend on them.
#include "engine/cpu_runtime.h"
#include "engine/trainer.h"
#include "random_tokens.h"

#include <cstdio>
#include <sys/resource.h>

using namespace crowdtrain::engine;
using crowdtrain::bench::RandomTokens;

int main(int argc, char** argv)
{
    prepareCpuRuntime(argv);
    configureCpuThreads(0);
    const int steps = argc > 1 ? std::atoi(argv[1]) : 5;

    TrainOptions options;
    options.model = *gptConfigByName("gpt2");
    options.model.blockSize = 256; // T=256: positions beyond it are never used
    options.batchSize = 4;
    options.maxIters = steps + 1;
    options.device = "cpu";
    TrainData data;
    data.train = std::make_unique<RandomTokens>(256, options.model.vocabSize);
    auto trainer = Trainer::create(options, std::move(data));
    if (!trainer) {
        std::fprintf(stderr, "%s\n", trainer.error().message.c_str());
        return 1;
    }
    (*trainer)->step(); // warm-up: allocations, optimizer state
    double seconds = 0;
    for (int i = 0; i < steps; ++i)
        seconds += (*trainer)->step().stepMs / 1e3;
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    const CpuRuntimeInfo cpu = cpuRuntimeInfo();
    std::printf("| model | B | T | steps | s/step | tokens/s | peak RSS |\n| --- | ---: | ---: | ---: | ---: | ---: | "
                "---: |\n");
    std::printf("| gpt2 124M (block 256) | 4 | 256 | %d | %.2f | %.0f | %.2f GiB |\n", steps, seconds / steps,
        4.0 * 256 * steps / seconds, double(usage.ru_maxrss) / (1024.0 * 1024.0));
    std::printf("\nBLAS %s (%s, %d threads), %d torch threads\n", cpu.blasCore.c_str(), cpu.blasThreading.c_str(),
        cpu.blasThreads, cpu.torchThreads);
    return 0;
}
