// What the volunteer's memory plan (net/limits/memory.h, planDevices) picks
// for GPT-2's four sizes on one, two and four GPUs of 12 and 24 GiB, for a
// task batch of 16 sequences of 1,024 tokens: the mode, the micro-batch on
// each GPU and the bytes each GPU is planned to hold (activations: those a
// micro-batch saves, checkpointed or not).
//
//   build/ci/bin/bench_device_plan [BATCH]
#include "net/limits/memory.h"

#include <cstdio>
#include <cstdlib>

using namespace crowdtrain::limits;

int main(int argc, char** argv)
{
    const int64_t batch = argc > 1 ? std::atoll(argv[1]) : 16;
    struct Named {
        const char* name;
        ModelShape shape;
    };
    const Named models[] = {
        {"GPT-2 124M", {12, 12, 768, 1024, 50257, 124439808}},
        {"GPT-2 350M", {24, 16, 1024, 1024, 50257, 354823168}},
        {"GPT-2 774M", {36, 20, 1280, 1024, 50257, 774030080}},
        {"GPT-2 1.5B", {48, 25, 1600, 1024, 50257, 1557611200}},
    };
    const uint64_t gib = uint64_t(1) << 30;
    std::printf("task batch %lld x 1024 tokens; the budget is the whole card (gpu_memory_limit_mib), 10%% kept as "
                "slack\n\n",
        static_cast<long long>(batch));
    std::printf(
        "| model | GPUs x memory | mode | GPUs used | micro-batch per GPU | state GB/GPU | + activations GB/GPU |\n");
    std::printf("| --- | --- | --- | ---: | ---: | ---: | ---: |\n");
    for (const Named& m : models)
        for (const uint64_t memory : {12 * gib, 24 * gib})
            for (const int gpus : {1, 2, 4}) {
                std::string why;
                const auto plan = planDevices(m.shape, batch, gpus, memory, why);
                if (!plan) {
                    std::printf("| %s | %d x %llu GiB | does not fit | | | | |\n", m.name, gpus,
                        static_cast<unsigned long long>(memory / gib));
                    continue;
                }
                const char* mode = plan->mode == DeviceMode::Single ? "one GPU"
                    : plan->mode == DeviceMode::DataParallel        ? "data parallel"
                    : plan->activationCheckpointing                 ? "ZeRO-3 + activation checkpointing"
                                                                    : "ZeRO-3";
                const uint64_t perSequence
                    = plan->activationCheckpointing ? checkpointedBytesPerSequence(m.shape) : bytesPerSequence(m.shape);
                std::printf("| %s | %d x %llu GiB | %s | %d | %lld | %.1f | %.1f |\n", m.name, gpus,
                    static_cast<unsigned long long>(memory / gib), mode, plan->devices,
                    static_cast<long long>(plan->microBatch), double(plan->fixedBytes) / 1e9,
                    double(plan->microBatch * int64_t(perSequence)) / 1e9);
            }
    return 0;
}
