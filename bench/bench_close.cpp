// A round close at full size without training (issue 41): random theta_0 of
// a GPT-2 preset, N random int8 submissions, then the close's path as the
// coordinator's worker and evaluation threads run it, stage by stage: the
// aggregate, the outer step, the next version's files and the ledger's
// commit (RoundState::computeClose), the switch (publishClose), theta's file hashed into the resource table and into
// its torrent, and the checkpoint's export. Prints a table of seconds, bytes written and the process's peak RSS after
// each stage (VmHWM).
//
//   bench_close PRESET [SUBMISSIONS] [DIR]     (PRESET: gpt2, gpt2-medium, gpt2-large, gpt2-xl)
#include "engine/diloco/codec.h"
#include "engine/gpt_config.h"
#include "net/coordinator/checkpoint_store.h"
#include "net/coordinator/round_state.h"
#include "net/swarm/torrent_file.h"
#include "net/transfer/resource_table.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>

namespace {

using namespace crowdtrain;
using Clock = std::chrono::steady_clock;

double mb(uint64_t bytes)
{
    return double(bytes) / 1e6;
}

uint64_t peakRssBytes()
{
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line))
        if (line.rfind("VmHWM:", 0) == 0)
            return std::stoull(line.substr(6)) * 1024;
    return 0;
}

std::vector<float> randomValues(int64_t n, float scale, uint32_t seed)
{
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, scale);
    std::vector<float> values(static_cast<std::size_t>(n));
    for (float& v : values)
        v = normal(rng);
    return values;
}

int fail(const char* what, const Error& error)
{
    std::fprintf(stderr, "bench_close: %s: %s\n", what, error.message.c_str());
    return 1;
}

} // namespace

int main(int argc, char** argv)
{
    if (argc < 2) {
        std::fprintf(stderr, "usage: bench_close PRESET [SUBMISSIONS] [DIR]\n");
        return 2;
    }
    const int submissions = argc > 2 ? std::max(1, std::atoi(argv[2])) : 2;
    const std::filesystem::path dir = argc > 3 ? argv[3] : std::filesystem::temp_directory_path() / "bench_close";
    std::filesystem::remove_all(dir);
    auto config = engine::gptConfigByName(argv[1]);
    if (!config)
        return fail("preset", config.error());
    coordinator::ProjectSpec spec;
    spec.name = "synthetic";
    spec.model = *config;
    spec.inner.steps = 1;
    spec.inner.batchSize = 1;
    spec.codec = diloco::Codec::Int8;
    spec.checkpoints.everyRounds = 1;
    auto store = coordinator::ProjectStore::open(spec, dir);
    if (!store)
        return fail("store", store.error());
    const int64_t p = engine::parameterCount(spec.model);
    std::printf("%s: P = %lld (%.0f MB of fp32), %d submissions, %s\n\n", argv[1], static_cast<long long>(p),
        mb(uint64_t(p) * 4), submissions, dir.c_str());

    coordinator::RoundState round(spec, *store, p);
    if (Status s = round.createVersionZero(randomValues(p, 0.02f, 1), std::nullopt, 0); !s)
        return fail("version 0", s.error());
    std::filesystem::create_directories(dir / "payloads");
    for (int i = 0; i < submissions; ++i) {
        const std::string key = "volunteer-" + std::to_string(i);
        (void)store->ledger().upsertVolunteer(key, key, "CPU", 0);
        const std::vector<float> delta = randomValues(p, 1e-3f, 100 + uint32_t(i));
        const std::filesystem::path payload = dir / "payloads" / (key + ".bin");
        std::ofstream(payload, std::ios::binary) << diloco::encode(diloco::Codec::Int8, delta.data(), p);
        coordinator::AcceptedSubmission accepted;
        accepted.record.round = 1;
        accepted.record.publicKey = key;
        accepted.record.tokens = 1000;
        accepted.record.computeMs = 1000;
        accepted.record.trainLoss = 3.0;
        accepted.record.accepted = true;
        if (Status s = round.add(accepted, payload, diloco::Codec::Int8); !s)
            return fail("add", s.error());
    }
    // The set-up's own peak (random vectors, payloads) is not the close's:
    // the high-water mark starts again here (Linux: clear_refs 5).
    std::ofstream("/proc/self/clear_refs") << "5";
    std::printf("| stage | seconds | written (MB) | peak RSS after (MB) |\n|---|---:|---:|---:|\n");
    std::printf(
        "| theta_0, momentum, residual, %d submissions aggregated | - | - | %.0f |\n", submissions, mb(peakRssBytes()));
    auto time = [](auto&& step) {
        const auto start = Clock::now();
        step();
        return std::chrono::duration<double>(Clock::now() - start).count();
    };
    double total = 0;
    auto row = [&](const char* stage, double seconds, uint64_t written) {
        total += seconds;
        std::printf("| %s | %.2f | %.0f | %.0f |\n", stage, seconds, mb(written), mb(peakRssBytes()));
        std::fflush(stdout);
    };

    Result<coordinator::RoundState::Closed> closed = Error::make("none", "not run");
    coordinator::RoundState::CloseInput input;
    input.nowMs = 1;
    input.volunteersOnline = uint64_t(submissions);
    input.serviceBytes = "{}";
    store->setDeferPruning(true); // as the coordinator does
    double seconds = time([&] { closed = round.computeClose(input); });
    if (!closed)
        return fail("computeClose", closed.error());
    row("average, outer step, theta + state + update written, ledger commit (worker)", seconds, closed->written.bytes);
    seconds = time([&] { round.publishClose(*closed); });
    row("switch to v1 (loop)", seconds, 0);
    const std::vector<std::filesystem::path> stale = store->takeUnreferenced();
    seconds = time([&] { (void)coordinator::ProjectStore::removeFiles(stale); });
    row("version 0's files removed (evaluation thread)", seconds, 0);
    net::ResourceTable table;
    seconds = time([&] { (void)table.addFile("state-v1", store->thetaFile(1)); });
    row("theta's file hashed into the resource table (worker)", seconds, 0);
    seconds = time([&] { (void)swarm::makeTorrent(store->thetaFile(1)); });
    row("theta's torrent (SHA-1 + SHA-256 tree, worker)", seconds, 0);
    auto checkpoints = coordinator::CheckpointStore::open(dir / "checkpoints", spec.checkpoints);
    if (!checkpoints)
        return fail("checkpoints", checkpoints.error());
    uint64_t checkpointBytes = 0;
    seconds = time([&] {
        auto named = coordinator::parameterViews(spec.model, *closed->params);
        if (!named)
            return;
        auto info = checkpoints->publish(1, 1000, std::nullopt, spec.model, *named, 0);
        if (info)
            checkpointBytes = info->totalBytes();
    });
    row("checkpoint exported (evaluation thread)", seconds, checkpointBytes);
    std::printf("| **the close off the loop, in all** | %.2f | %.0f | %.0f |\n", total,
        mb(closed->written.bytes + checkpointBytes), mb(peakRssBytes()));
    std::filesystem::remove_all(dir);
    return 0;
}
