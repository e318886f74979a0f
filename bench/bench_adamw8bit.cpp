// The CPU 8-bit AdamW step (engine/adamw8bit.h): elements a second of
// AdamW8bit::step over one float32 parameter of N elements, against
// libtorch's own AdamW (fp32 moments) on the same parameter. Each figure is
// the best of REPEATS steps after one warm-up step; THREADS intra-op threads.
//
//   bench_adamw8bit [N] [REPEATS] [THREADS]
//
// Defaults: 10,000,000 elements, 5 steps, 1 thread.
#include "engine/adamw8bit.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <torch/torch.h>

using namespace crowdtrain;

namespace {

template <typename Step> double bestSeconds(int repeats, Step step)
{
    step(); // warm-up: the moments are allocated on the first step
    double best = 1e30;
    for (int r = 0; r < repeats; ++r) {
        const auto start = std::chrono::steady_clock::now();
        step();
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    return best;
}

} // namespace

int main(int argc, char** argv)
{
    const int64_t n = argc > 1 ? std::atoll(argv[1]) : 10'000'000;
    const int repeats = argc > 2 ? std::atoi(argv[2]) : 5;
    const int threads = argc > 3 ? std::atoi(argv[3]) : 1;
    if (n <= 0 || repeats <= 0 || threads <= 0) {
        std::fprintf(stderr, "usage: bench_adamw8bit [N > 0] [REPEATS > 0] [THREADS > 0]\n");
        return 2;
    }
    torch::set_num_threads(threads);
    torch::manual_seed(1);
    torch::NoGradGuard noGrad;
    const auto options = torch::optim::AdamWOptions(1e-3).weight_decay(0.1);

    torch::Tensor p8 = torch::randn({n});
    p8.mutable_grad() = torch::randn({n}) * 1e-2;
    torch::optim::AdamW groups8({p8}, options);
    engine::AdamW8bit kernel;
    const double seconds8 = bestSeconds(repeats, [&] { kernel.step(groups8); });

    torch::Tensor p32 = p8.clone();
    p32.mutable_grad() = p8.grad().clone();
    torch::optim::AdamW adamw({p32}, options);
    const double seconds32 = bestSeconds(repeats, [&] { adamw.step(); });

    std::printf("elements %lld, threads %d, best of %d\n", (long long)n, threads, repeats);
    std::printf("8-bit AdamW step   %8.1f ms  %7.1f M elements/s\n", seconds8 * 1e3, n / seconds8 / 1e6);
    std::printf("libtorch AdamW     %8.1f ms  %7.1f M elements/s\n", seconds32 * 1e3, n / seconds32 / 1e6);
    return 0;
}
