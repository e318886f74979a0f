// The busy-share governor on real CPU training (issue 16): for each target
// share, train GPT (4 layers, 128 wide, byte-level) on Tiny Shakespeare for
// a fixed time with the daemon's PauseGate resting between steps, and report
// the share of wall time the steps took, the governor's own measure and the
// tokens per second. Target: within +-5 points of each target.
//
//   build/dev/bin/bench_limits [seconds per target = 60] [targets = 25,50,75,100]

#include "engine/cpu_runtime.h"
#include "engine/diloco/flat_params.h"
#include "engine/gpt.h"
#include "engine/token_shard.h"
#include "net/core_service/inner_trainer.h"
#include "net/daemon/project_runner.h"
#include "net/volunteer/range_source.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

using namespace crowdtrain;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv)
{
    // As the daemon does: OpenBLAS's best kernels for this CPU, the cores to libtorch.
    engine::prepareCpuRuntime(argv);
    engine::configureCpuThreads(0);
    const double seconds = argc > 1 ? std::stod(argv[1]) : 60.0;
    std::vector<int> targets = {25, 50, 75, 100};
    if (argc > 2) {
        targets.clear();
        std::string list = argv[2];
        for (std::size_t at = 0; at < list.size();) {
            const std::size_t comma = std::min(list.find(',', at), list.size());
            targets.push_back(std::stoi(list.substr(at, comma - at)));
            at = comma + 1;
        }
    }
    const std::string corpus = CROWDTRAIN_SHARED_DATA_DIR "/tinyshakespeare.txt";
    std::ifstream in(corpus, std::ios::binary);
    if (!in) {
        std::fprintf(stderr, "missing %s\n", corpus.c_str());
        return 1;
    }
    std::string text((std::istreambuf_iterator<char>(in)), {});
    std::vector<uint16_t> tokens(text.begin(), text.end());
    for (uint16_t& t : tokens)
        t &= 0xff;
    const auto dir = std::filesystem::temp_directory_path() / ("bench_limits." + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    if (!engine::writeTokenShard(dir / "s_train.bin", tokens)) {
        std::fprintf(stderr, "cannot write %s\n", dir.c_str());
        return 1;
    }
    volunteer::ShardLibrary library(dir);
    const engine::GptConfig model{4, 4, 128, 128, 256, 0.0};
    const int64_t batch = 8;
    const uint64_t steps = uint64_t(tokens.size()) / uint64_t(batch * (model.blockSize + 1)) - 1;
    const net::InnerSettings inner{
        steps, uint64_t(batch), uint64_t(model.blockSize), 1e-3, 1e-4, 0, 0, 0.9, 0.95, 0.1, 1.0};
    torch::manual_seed(1);
    engine::Gpt initial(model);
    const std::vector<float> theta = diloco::flatten(initial);

    std::printf("| target | busy share (steps' wall time / wall) | governor's measure | steps | tokens/s |\n");
    std::printf("| ---: | ---: | ---: | ---: | ---: |\n");
    for (int target : targets) {
        coreservice::InnerTrainer trainer(model, inner, "cpu", 0);
        auto source = volunteer::RangeBatchSource::create(
            library, {{"s_train.bin", 0, uint64_t(tokens.size())}}, model.blockSize, 256, batch, steps * batch);
        if (!source) {
            std::fprintf(stderr, "%s\n", source.error().message.c_str());
            return 1;
        }
        daemon::PauseGate gate;
        gate.setBusyTarget(target / 100.0);
        std::atomic<bool> abort{false};
        std::atomic<bool> wrapUp{false};
        double busyMs = 0;
        uint64_t done = 0;
        // The first steps warm up libtorch; measure from the third.
        Clock::time_point from{};
        const auto start = Clock::now();
        auto outcome
            = trainer.run(theta, std::move(*source), steps, 0, abort, wrapUp, [&](const engine::StepReport& report) {
                  if (report.step == 2)
                      from = Clock::now();
                  else if (report.step > 2) {
                      busyMs += report.stepMs;
                      ++done;
                  }
                  gate.afterStep(report.stepMs, [] { return false; });
                  if (Clock::now() - start > std::chrono::duration<double>(seconds))
                      wrapUp = true;
              });
        const double wall = std::chrono::duration<double>(Clock::now() - from).count();
        if (!outcome) {
            std::fprintf(stderr, "%s\n", outcome.error().message.c_str());
            return 1;
        }
        std::printf("| %d%% | %.1f%% | %.1f%% | %llu | %.0f |\n", target, 100.0 * busyMs / 1e3 / wall,
            100.0 * gate.measuredBusy(), static_cast<unsigned long long>(done),
            double(done) * double(batch * model.blockSize) / wall);
        std::fflush(stdout);
    }
    std::filesystem::remove_all(dir);
    return 0;
}
