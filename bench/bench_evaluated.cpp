// What scoring one submission costs the coordinator at GPT-2 124M, the
// Gauntlet's way (issue 42 item 3, "evaluated contributions"): the loss
// change a submission buys on held-out batches its sender did not pick.
// Per round the coordinator would evaluate theta_v once; per scored
// submission it decodes the int8 payload, applies it to a copy of theta_v
// (theta_v - delta: the sender's local weights), loads that into the model
// and evaluates the same batches. Random weights, a random payload and
// random tokens: the cost does not depend on them. Prints a table.
//
//   bench_evaluated [BATCHES] [BATCH] [BLOCK] [SUBMISSIONS]   (defaults 2 4 1024 3)

#include "engine/cpu_runtime.h"
#include "engine/diloco/codec.h"
#include "engine/diloco/flat_params.h"
#include "engine/gpt_config.h"
#include "random_tokens.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sys/resource.h>

using namespace crowdtrain;

namespace {

double secondsSince(std::chrono::steady_clock::time_point start)
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

} // namespace

int main(int argc, char** argv)
{
    engine::prepareCpuRuntime(argv);
    engine::configureCpuThreads(0);
    const int64_t batches = argc > 1 ? std::atoll(argv[1]) : 2;
    const int64_t batch = argc > 2 ? std::atoll(argv[2]) : 4;
    const int64_t block = argc > 3 ? std::atoll(argv[3]) : 1024;
    const int submissions = argc > 4 ? std::atoi(argv[4]) : 3;

    engine::GptConfig config = *engine::gptConfigByName("gpt2");
    config.blockSize = block;
    config.dropout = 0.0;
    engine::Gpt model = diloco::seededModel(config, 1);
    model->eval();
    const std::vector<float> theta = diloco::flatten(model);
    const int64_t n = int64_t(theta.size());
    bench::RandomTokens tokens(block, config.vocabSize);
    std::vector<int64_t> x(std::size_t(batches * batch * block)), y(x.size());
    for (int64_t i = 0; i < batches; ++i)
        tokens.next(batch, x.data() + i * batch * block, y.data() + i * batch * block);
    auto evaluate = [&] {
        torch::NoGradGuard noGrad;
        double sum = 0;
        for (int64_t i = 0; i < batches; ++i)
            sum += model
                       ->loss(torch::from_blob(x.data() + i * batch * block, {batch, block}, torch::kLong),
                           torch::from_blob(y.data() + i * batch * block, {batch, block}, torch::kLong))
                       .item<double>();
        return sum / double(batches);
    };
    auto start = std::chrono::steady_clock::now();
    const double base = evaluate();
    const double baseSeconds = secondsSince(start);

    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 1e-3f);
    std::vector<float> delta(theta.size());
    for (float& v : delta)
        v = normal(rng);
    const std::string payload = diloco::encode(diloco::Codec::Int8, delta.data(), n);
    double applySeconds = 0, evalSeconds = 0, change = 0;
    std::vector<float> local(theta.size());
    for (int s = 0; s < submissions; ++s) {
        start = std::chrono::steady_clock::now();
        local = theta;
        if (!diloco::decodeAccumulate(diloco::Codec::Int8, payload, n, -1.0f, local.data())
            || !diloco::assign(model, local.data(), n)) {
            std::fprintf(stderr, "cannot apply the payload\n");
            return 1;
        }
        applySeconds += secondsSince(start);
        start = std::chrono::steady_clock::now();
        change = evaluate() - base;
        evalSeconds += secondsSince(start);
    }
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    const double perSubmission = (applySeconds + evalSeconds) / submissions;
    const double evalTokens = double(batches * batch * block);
    std::printf("| model | P | held-out tokens | theta_v's loss once a round (s) | decode + apply + load per "
                "submission (s) | evaluate per submission (s) | per submission (s) | tokens/s | peak RSS |\n");
    std::printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    std::printf("| gpt2 124M (block %lld) | %lld | %.0f | %.2f | %.3f | %.2f | %.2f | %.0f | %.2f GiB |\n",
        static_cast<long long>(block), static_cast<long long>(n), evalTokens, baseSeconds, applySeconds / submissions,
        evalSeconds / submissions, perSubmission, evalTokens * submissions / evalSeconds,
        double(usage.ru_maxrss) / (1024.0 * 1024.0));
    std::printf("\nloss change of the last (random) submission: %+.4f; %d submissions; %d torch threads\n", change,
        submissions, engine::cpuRuntimeInfo().torchThreads);
    return 0;
}
