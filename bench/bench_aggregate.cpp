// Coordinator aggregation throughput: one random pseudo-gradient encoded
// once per codec, then decodeAccumulate of K submissions into one fp32
// accumulator, as the coordinator does during a round. Prints a markdown
// table (payload GB/s, submissions/s, peak RSS).
//
//   build/dev/bin/bench_aggregate [--elements N] [--submissions K] [--codecs int8,fp16,fp32,sparse]
//
// N defaults to GPT-2 small's 124,439,808 parameters.
//
// "sparse" in --codecs measures a round of the sparse codec on GPT-2 small's
// tensors (N is ignored): the volunteer's encode, then K distinct random
// well-formed messages (k 64 of 4096) added to a SparseAggregator (each
// made just before it is added, outside the timing, never all held), the
// close as the coordinator makes it (median scaling, outer SGD, its residual,
// the int4 union update) and its application.
#include "engine/diloco/codec.h"
#include "engine/diloco/sparse_aggregator.h"
#include "engine/diloco/sparse_codec.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

using namespace crowdtrain;
using namespace crowdtrain::diloco;

namespace {

double peakRssMiB()
{
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line))
        if (line.rfind("VmHWM:", 0) == 0)
            return std::strtod(line.c_str() + 6, nullptr) / 1024.0; // kB
    return 0.0;
}

double secondsOf(const std::function<void()>& work)
{
    const auto start = std::chrono::steady_clock::now();
    work();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void row(const std::string& codec, const std::string& operation, int64_t payloadBytes, int64_t repeats, double seconds)
{
    const double perSecond = double(repeats) / seconds;
    std::printf("| %s | %s | %lld | %.2f | %.2f | %.0f |\n", codec.c_str(), operation.c_str(),
        static_cast<long long>(payloadBytes), double(payloadBytes) * perSecond / 1e9, perSecond, peakRssMiB());
    std::fflush(stdout);
}

void check(const Status& status)
{
    if (!status) {
        std::fprintf(stderr, "bench_aggregate: %s: %s\n", status.error().code.c_str(), status.error().message.c_str());
        std::exit(1);
    }
}

// GPT-2 small's parameters in flat-vector order (124,439,808 elements).
std::vector<int64_t> gpt2SmallSizes()
{
    const int64_t d = 768;
    std::vector<int64_t> sizes{50257 * d, 1024 * d};
    for (int layer = 0; layer < 12; ++layer)
        for (const int64_t n : {d, d, d * 3 * d, 3 * d, d * d, d, d, d, d * 4 * d, 4 * d, 4 * d * d, d})
            sizes.push_back(n);
    sizes.push_back(d);
    sizes.push_back(d);
    return sizes;
}

// A well-formed message as a volunteer's would look, written directly in
// the layout of docs/protocol.md §7 (an encode per message would take
// longer than the aggregation measured): per tensor a table, per chunk the
// kept count of distinct random indices (ascending), random codes.
std::string randomMessage(const SparseLayout& layout, std::mt19937& rng)
{
    std::string bytes(size_t(layout.messageBytes()), '\0');
    auto* out = reinterpret_cast<unsigned char*>(bytes.data());
    std::uniform_real_distribution<float> magnitude(1e-4f, 2e-3f);
    std::vector<uint8_t> taken(static_cast<size_t>(layout.chunk()));
    std::vector<uint16_t> index;
    auto pack = [&out](const std::vector<uint16_t>& values, int bits) {
        uint64_t acc = 0;
        int have = 0;
        for (const uint16_t v : values) {
            acc |= uint64_t(v) << have;
            for (have += bits; have >= 8; have -= 8, acc >>= 8)
                *out++ = static_cast<unsigned char>(acc);
        }
        if (have > 0)
            *out++ = static_cast<unsigned char>(acc);
    };
    for (const int64_t n : layout.tensorElements()) {
        const float lo = magnitude(rng);
        const float hi = 3.0f * lo;
        const float table[4] = {-hi, -lo, lo, hi};
        std::memcpy(out, table, sizeof table);
        out += sizeof table;
        for (int64_t first = 0; first < n; first += layout.chunk()) {
            const int64_t length = std::min(layout.chunk(), n - first);
            const int64_t kept = layout.keptIn(length);
            std::fill(taken.begin(), taken.end(), 0);
            index.clear();
            while (int64_t(index.size()) < kept) {
                const auto at = uint16_t(rng() % uint64_t(length));
                if (!taken[at]) {
                    taken[at] = 1;
                    index.push_back(at);
                }
            }
            std::sort(index.begin(), index.end());
            out = packSparseIndices(index.data(), kept, length, out);
            for (uint16_t& code : index)
                code = uint16_t(rng() & 3);
            pack(index, 2);
        }
    }
    return bytes;
}

void sparseRound(int64_t submissions)
{
    const SparseLayout layout = *SparseLayout::make(gpt2SmallSizes(), SparseOptions{4096, 64, 0.0});
    const int64_t n = layout.elements();
    std::printf(
        "\nsparse: P = %lld (GPT-2 small's tensors), k 64 of 4096, message %lld bytes (%.5f bytes per element)\n\n",
        static_cast<long long>(n), static_cast<long long>(layout.messageBytes()),
        double(layout.messageBytes()) / double(n));
    std::printf("| step | submissions | seconds | per submission ms | peak RSS MiB |\n|---|---:|---:|---:|---:|\n");
    {
        const SparseLayout volunteer = *SparseLayout::make(gpt2SmallSizes(), SparseOptions{4096, 64, 0.95});
        std::vector<float> delta(static_cast<size_t>(n));
        std::mt19937 rng(42);
        std::normal_distribution<float> normal(0.0f, 1e-3f);
        for (float& v : delta)
            v = normal(rng);
        std::vector<float> e(delta.size(), 0.0f);
        std::string message;
        const double seconds = secondsOf([&] { message = encodeSparse(volunteer, delta.data(), e.data()); });
        std::printf("| volunteer: encode + error feedback | 1 | %.2f | | %.0f |\n", seconds, peakRssMiB());
    }
    SparseAggregator aggregator(layout);
    std::mt19937 rng(7);
    double addSeconds = 0.0;
    for (int64_t k = 0; k < submissions; ++k) {
        const std::string message = randomMessage(layout, rng);
        addSeconds += secondsOf([&] { check(aggregator.add(message, 51200.0 + double(k))); });
    }
    std::printf("| coordinator: check + add (median scaling) | %lld | %.2f | %.1f | %.0f |\n",
        static_cast<long long>(submissions), addSeconds, 1e3 * addSeconds / double(submissions), peakRssMiB());
    // The coordinator's close (net/coordinator/round_state.cpp): the
    // average, the outer SGD step, its residual and the int4 union update.
    std::string update;
    std::vector<float> residual(size_t(n), 0.0f);
    const double closeSeconds = secondsOf([&] {
        auto u = aggregator.average();
        check(u.ok() ? Status::success() : Status(u.error()));
        for (float& v : *u)
            v = -v;
        update = encodeSparseRoundUpdate(layout, u->data(), 0, residual.data());
    });
    std::printf("| coordinator: close (average, outer SGD, residual, int%d union update) | %lld | %.2f | | %.0f |\n",
        layout.options().updateBits, static_cast<long long>(submissions), closeSeconds, peakRssMiB());
    // The same round with the coordinator re-sparsifying (sparse.down_k 64):
    // the update's size no longer grows with the submissions.
    std::string topK;
    std::fill(residual.begin(), residual.end(), 0.0f);
    const double topKSeconds = secondsOf([&] {
        auto u = aggregator.average();
        check(u.ok() ? Status::success() : Status(u.error()));
        for (float& v : *u)
            v = -v;
        topK = encodeSparseRoundUpdate(layout, u->data(), 64, residual.data());
    });
    std::printf(
        "| coordinator: close with down_k 64 (average, outer SGD, residual, top-k update) | %lld | %.2f | | %.0f |\n",
        static_cast<long long>(submissions), topKSeconds, peakRssMiB());
    std::printf("\nwith down_k 64: update %zu bytes, %lld entries, %.4f bytes per element\n", topK.size(),
        static_cast<long long>(*sparseUpdateEntries(layout, topK)), double(topK.size()) / double(n));
    std::vector<float> theta(size_t(n), 0.0f);
    const double applySeconds = secondsOf([&] { check(applySparseUpdate(layout, update, theta.data())); });
    std::printf("| volunteer: apply update | | %.2f | | %.0f |\n", applySeconds, peakRssMiB());
    const int64_t entries = *sparseUpdateEntries(layout, update);
    std::printf("\nround total (add + close) %.2f s; update %zu bytes, %lld entries (%.1f%% of P), %.4f bytes per "
                "element\n",
        addSeconds + closeSeconds, update.size(), static_cast<long long>(entries), 100.0 * double(entries) / double(n),
        double(update.size()) / double(n));
}

} // namespace

int main(int argc, char** argv)
{
    int64_t n = 124439808;
    int64_t submissions = 8;
    std::string codecs = "int8,fp16,fp32";
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string flag = argv[i];
        if (flag == "--elements")
            n = std::atoll(argv[i + 1]);
        else if (flag == "--submissions")
            submissions = std::atoll(argv[i + 1]);
        else if (flag == "--codecs")
            codecs = argv[i + 1];
        else {
            std::fprintf(
                stderr, "usage: %s [--elements N] [--submissions K] [--codecs int8,fp16,fp32,sparse]\n", argv[0]);
            return 2;
        }
    }
    if (n <= 0 || submissions <= 0) {
        std::fprintf(stderr, "bench_aggregate: --elements and --submissions must be positive\n");
        return 2;
    }

    if (codecs == "sparse") {
        sparseRound(submissions);
        return 0;
    }
    std::vector<float> acc(static_cast<std::size_t>(n), 0.0f);
    std::printf("P = %lld elements, K = %lld submissions, one thread\n\n", static_cast<long long>(n),
        static_cast<long long>(submissions));
    std::printf("| codec | operation | payload bytes | GB/s of payload | per second | peak RSS MiB |\n");
    std::printf("|---|---|---:|---:|---:|---:|\n");

    std::size_t start = 0;
    while (start <= codecs.size()) {
        const std::size_t comma = std::min(codecs.find(',', start), codecs.size());
        const std::string name = codecs.substr(start, comma - start);
        start = comma + 1;
        if (name == "sparse") {
            sparseRound(submissions);
            continue;
        }
        auto codec = parseCodec(name);
        if (!codec) {
            std::fprintf(stderr, "bench_aggregate: %s\n", codec.error().message.c_str());
            return 2;
        }
        std::string payload;
        double encodeSeconds = 0.0;
        {
            std::vector<float> x(static_cast<std::size_t>(n));
            std::mt19937 rng(42);
            std::normal_distribution<float> normal(0.0f, 1e-3f);
            for (float& v : x)
                v = normal(rng);
            std::vector<float> residual(x.size(), 0.0f);
            encodeSeconds = secondsOf([&] { payload = encode(*codec, x.data(), n, residual.data()); });
        }
        const auto bytes = int64_t(payload.size());
        row(name, "encode + error feedback", bytes, 1, encodeSeconds);
        double seconds = secondsOf([&] {
            for (int64_t k = 0; k < submissions; ++k)
                check(decodeAccumulate(*codec, payload, n, 1000.0f + float(k), acc.data()));
        });
        row(name, "decodeAccumulate", bytes, submissions, seconds);
        if (*codec == Codec::Int8) {
            seconds = secondsOf([&] { check(applyUpdate(*codec, payload, n, acc.data())); });
            row(name, "applyUpdate", bytes, 1, seconds);
            seconds = secondsOf([&] { check(inspect(*codec, payload, n).ok() ? Status::success() : Status()); });
            row(name, "inspect", bytes, 1, seconds);
        }
    }
    return 0;
}
