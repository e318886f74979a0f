// Coordinator aggregation throughput: one random pseudo-gradient encoded
// once per codec, then decodeAccumulate of K submissions into one fp32
// accumulator, as the coordinator does during a round. Prints a markdown
// table (payload GB/s, submissions/s, peak RSS).
//
//   build/dev/bin/bench_aggregate [--elements N] [--submissions K] [--codecs int8,fp16,fp32]
//
// N defaults to GPT-2 small's 124,439,808 parameters.
#include "engine/diloco/codec.h"

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
            std::fprintf(stderr, "usage: %s [--elements N] [--submissions K] [--codecs int8,fp16,fp32]\n", argv[0]);
            return 2;
        }
    }
    if (n <= 0 || submissions <= 0) {
        std::fprintf(stderr, "bench_aggregate: --elements and --submissions must be positive\n");
        return 2;
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
