// Coordinator scale: a real crowdtrain-server process on loopback against N
// simulated volunteers, each with its own Curve key pair and DEALER socket,
// driven by a few threads (epoll on the sockets' ZMQ_FDs, requests sent
// asynchronously and timed by request id). Every volunteer joins, then
// heartbeats every --heartbeat-ms; a fraction of them (--trainers) also ask
// for tasks when a heartbeat says "train", "compute" for --compute-ms, then
// upload an int8 payload of the project's size chunk by chunk and submit it,
// so rounds close now and then. Per N: replies/s, p50/p99 reply latency (a
// request sent in the window and never answered counts as infinitely late),
// the server's RSS and CPU. Before that, the server's per-submission work on
// a GPT-2-sized int8 payload (SHA-256, inspection, streaming aggregation) in
// this process.
//
//   build/dev/bin/bench_coordinator_scale [--volunteers 100,250,500,1000,2000] [--seconds 20]
//       [--threads 2] [--trainers 0.1] [--compute-ms 2000] [--tasks-per-round 4] [--heartbeat-ms 1000]
//       [--n-layer 2] [--n-embd 32] [--aggregate-elements 124439808 (0: skip)]
#include "bench/coordinator_driver.h"

#include "engine/diloco/aggregator.h"
#include "net/transfer/sha256.h"
#include "net/transport/client.h"

#include <algorithm>
#include <cmath>
#include <sys/resource.h>
#include <thread>

using namespace crowdtrain;
using namespace crowdtrain::bench;

namespace {

double secondsSince(std::chrono::steady_clock::time_point start)
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double percentile(std::vector<double>& sorted, double q)
{
    if (sorted.empty())
        return 0.0;
    const auto index = std::size_t(std::max(0.0, std::ceil(q * double(sorted.size())) - 1.0));
    return sorted[std::min(index, sorted.size() - 1)];
}

std::string ms(double value)
{
    if (std::isinf(value))
        return "timeout";
    char text[32];
    std::snprintf(text, sizeof text, value < 10 ? "%.2f" : "%.1f", value);
    return text;
}

double selfCpuSeconds()
{
    rusage usage{};
    ::getrusage(RUSAGE_SELF, &usage);
    return double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec)
        + double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

// The server's work per accepted submission, on one GPT-2-sized payload held in memory.
void aggregationTable(int64_t n)
{
    std::string payload;
    {
        std::vector<float> x(static_cast<std::size_t>(n));
        uint64_t s = 0x9e3779b97f4a7c15ull;
        for (float& v : x) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            v = (float(s >> 40) / float(1 << 24) - 0.5f) * 2e-3f;
        }
        payload = diloco::encode(diloco::Codec::Int8, x.data(), n);
    }
    const std::size_t slice = 4u << 20; // the server reads payload files in 4 MiB slices
    diloco::RoundAggregator aggregator(n);
    auto timed = [&](const char* what, int repeats, const std::function<bool()>& work) {
        const auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < repeats; ++i)
            if (!work()) {
                std::fprintf(stderr, "%s failed\n", what);
                std::exit(1);
            }
        const double seconds = secondsSince(start) / repeats;
        std::printf("| %s | %.2f | %.0f |\n", what, double(payload.size()) / seconds / 1e9, seconds * 1000);
        return seconds;
    };
    std::printf("Server work per int8 submission of P = %lld (%.1f MB), one thread, in memory:\n\n",
        static_cast<long long>(n), double(payload.size()) / 1e6);
    std::printf("| step | GB/s of payload | ms per submission |\n|---|---:|---:|\n");
    double total = timed("sha256", 3, [&] { return net::sha256Hex(payload).size() == 64; });
    total += timed("inspect (StreamInspector)", 3, [&] {
        diloco::StreamInspector inspector(diloco::Codec::Int8, n);
        for (std::size_t at = 0; at < payload.size(); at += slice)
            if (!inspector.feed(std::string_view(payload).substr(at, slice)))
                return false;
        return bool(inspector.finish());
    });
    total += timed("decodeAccumulate (RoundAggregator begin/feed/commit)", 3, [&] {
        if (!aggregator.begin(diloco::Codec::Int8, 1000.0))
            return false;
        for (std::size_t at = 0; at < payload.size(); at += slice)
            if (!aggregator.feed(std::string_view(payload).substr(at, slice)))
                return false;
        return bool(aggregator.commit());
    });
    std::printf("| all three (no disk) | %.2f | %.0f |\n\n", double(payload.size()) / total / 1e9, total * 1000);
    std::fflush(stdout);
}

struct Row {
    int volunteers = 0;
    double repliesPerSecond = 0, p50 = 0, p99 = 0, rssMiB = 0, hwmMiB = 0, serverCpu = 0, clientCpu = 0;
    int64_t rounds = 0, accepted = 0, unanswered = 0, errors = 0;
    std::array<std::vector<double>, kKinds> latencies;
};

// Joins once with net::Client to learn the project's size, then leaves.
ProjectFacts probe(zmq::context_t& context, const ServerProcess& server)
{
    auto keys = net::generateKeyPair();
    auto client = net::Client::connect(context, {server.endpoint, server.publicKey, *keys});
    if (!client) {
        std::fprintf(stderr, "probe: %s\n", client.error().message.c_str());
        std::exit(1);
    }
    auto joined = (*client)->request<net::JoinReply>(net::JoinRequest{"tiny", "probe", "bench", "CPU"}, 30000);
    if (!joined) {
        std::fprintf(stderr, "probe join: %s\n", joined.error().message.c_str());
        std::exit(1);
    }
    (void)(*client)->request<net::LeaveReply>(net::LeaveRequest{"tiny", joined->session});
    ProjectFacts facts;
    facts.elements = net::manifestElements(joined->manifest);
    facts.chunkBytes = joined->chunkBytes;
    facts.taskTokens = joined->inner.steps * joined->inner.batchSize * joined->inner.blockSize;
    std::vector<float> delta(static_cast<std::size_t>(facts.elements));
    for (int k = 0; k < 4; ++k) { // a few payloads of the same norm scale (the norm gate compares them)
        uint64_t s = 0x2545f4914f6cdd1dull + uint64_t(k);
        for (float& v : delta) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            v = (float(s >> 40) / float(1 << 24) - 0.5f) * 2e-3f;
        }
        facts.payloads.push_back(diloco::encode(diloco::Codec::Int8, delta.data(), int64_t(facts.elements)));
        facts.sha256.push_back(net::sha256Hex(facts.payloads.back()));
    }
    return facts;
}

Row measure(int n, const BenchOptions& o, const std::filesystem::path& dir, const std::filesystem::path& spec)
{
    using Clock = std::chrono::steady_clock;
    Row row;
    row.volunteers = n;
    ServerProcess server;
    const auto state = dir / ("state-" + std::to_string(n));
    if (!server.start(spec, state, o.heartbeatMs, dir / ("server-" + std::to_string(n) + ".log")))
        std::exit(1);
    zmq::context_t context(1);
    context.set(zmq::ctxopt::max_sockets, n + 256);
    Shared shared;
    shared.endpoint = server.endpoint;
    shared.serverKey = server.publicKey;
    shared.facts = probe(context, server);

    const int threads = std::max(1, std::min(o.threads, n));
    std::vector<std::unique_ptr<Driver>> drivers;
    for (int t = 0, first = 0; t < threads; ++t) {
        const int count = n / threads + (t < n % threads ? 1 : 0);
        drivers.push_back(std::make_unique<Driver>(context, shared, o, first, count));
        first += count;
    }
    std::vector<std::thread> running;
    for (auto& d : drivers)
        running.emplace_back([&d] { d->run(); });
    const auto joinStart = Clock::now();
    while (shared.joinsAnswered.load() < n && secondsSince(joinStart) < 300)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const double joinSeconds = secondsSince(joinStart);
    // Settle one heartbeat interval so that every volunteer is in its rhythm.
    std::this_thread::sleep_for(std::chrono::milliseconds(o.heartbeatMs + 1000));
    const double cpu0 = server.cpuSeconds(), self0 = selfCpuSeconds();
    const int64_t version0 = shared.maxVersion.load();
    shared.windowStartNs.store(nowNs());
    std::this_thread::sleep_for(std::chrono::seconds(o.seconds));
    shared.windowEndNs.store(nowNs());
    row.serverCpu = (server.cpuSeconds() - cpu0) / o.seconds;
    row.clientCpu = (selfCpuSeconds() - self0) / o.seconds;
    row.rssMiB = server.memoryMiB("VmRSS:");
    row.hwmMiB = server.memoryMiB("VmHWM:");
    row.rounds = shared.maxVersion.load() - version0;
    std::this_thread::sleep_for(std::chrono::milliseconds(o.graceMs)); // late replies still count
    shared.stop.store(true);
    for (auto& t : running)
        t.join();
    std::vector<double> all;
    for (auto& d : drivers) {
        const DriverStats& s = d->stats();
        row.accepted += s.accepted;
        row.unanswered += s.unanswered;
        row.errors += s.errors;
        row.repliesPerSecond += double(s.repliesInWindow) / o.seconds;
        for (int k = 0; k < kKinds; ++k)
            row.latencies[k].insert(row.latencies[k].end(), s.latencies[k].begin(), s.latencies[k].end());
        for (const auto& [what, count] : s.errorCodes)
            std::fprintf(stderr, "  N=%d: %lld x %s\n", n, static_cast<long long>(count), what.c_str());
    }
    for (int k = 0; k < kKinds; ++k) {
        std::sort(row.latencies[k].begin(), row.latencies[k].end());
        if (k != int(Kind::Join))
            all.insert(all.end(), row.latencies[k].begin(), row.latencies[k].end());
    }
    all.insert(all.end(), std::size_t(row.unanswered), INFINITY);
    std::sort(all.begin(), all.end());
    row.p50 = percentile(all, 0.50);
    row.p99 = percentile(all, 0.99);
    drivers.clear();
    server.stop();
    std::fprintf(stderr, "N=%d: joined in %.1f s, %zu requests in the window\n", n, joinSeconds, all.size());
    return row;
}

std::vector<int> parseList(const std::string& text)
{
    std::vector<int> values;
    std::size_t start = 0;
    while (start < text.size()) {
        const std::size_t comma = std::min(text.find(',', start), text.size());
        values.push_back(std::atoi(text.substr(start, comma - start).c_str()));
        start = comma + 1;
    }
    return values;
}

} // namespace

int main(int argc, char** argv)
{
    BenchOptions o;
    std::vector<int> counts = {100, 250, 500, 1000, 2000};
    int64_t aggregateElements = 124439808;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string flag = argv[i], value = argv[i + 1];
        if (flag == "--volunteers")
            counts = parseList(value);
        else if (flag == "--seconds")
            o.seconds = std::max(1, std::atoi(value.c_str()));
        else if (flag == "--threads")
            o.threads = std::max(1, std::atoi(value.c_str()));
        else if (flag == "--trainers")
            o.trainerFraction = std::atof(value.c_str());
        else if (flag == "--compute-ms")
            o.computeMs = std::max(0, std::atoi(value.c_str()));
        else if (flag == "--tasks-per-round")
            o.tasksPerRound = std::max(1, std::atoi(value.c_str()));
        else if (flag == "--heartbeat-ms")
            o.heartbeatMs = std::max(100, std::atoi(value.c_str()));
        else if (flag == "--n-layer")
            o.model.nLayer = std::max(1, std::atoi(value.c_str()));
        else if (flag == "--n-embd")
            o.model.nEmbd = std::max(2, std::atoi(value.c_str()));
        else if (flag == "--aggregate-elements")
            aggregateElements = std::atoll(value.c_str());
        else {
            std::fprintf(stderr, "unknown option %s (see the comment at the top of bench_coordinator_scale.cpp)\n",
                flag.c_str());
            return 2;
        }
    }
    if (counts.empty() || std::any_of(counts.begin(), counts.end(), [](int n) { return n <= 0; })) {
        std::fprintf(stderr, "--volunteers: a list of positive counts\n");
        return 2;
    }
    rlimit files{};
    ::getrlimit(RLIMIT_NOFILE, &files);
    files.rlim_cur = files.rlim_max; // both processes need ~2 descriptors per volunteer
    ::setrlimit(RLIMIT_NOFILE, &files);

    if (aggregateElements > 0)
        aggregationTable(aggregateElements);

    const std::filesystem::path corpus = CROWDTRAIN_SHARED_DATA_DIR "/tinyshakespeare.txt";
    if (!std::filesystem::is_regular_file(corpus)) {
        std::fprintf(stderr, "bench_coordinator_scale: missing input %s\n", corpus.c_str());
        return 1;
    }
    char pattern[] = "/tmp/ct-bench-coordinator-XXXXXX";
    const std::filesystem::path dir = ::mkdtemp(pattern);
    const auto data = dir / "data";
    if (runProgram({binary("crowdtrain-prepare").string(), corpus.string(), "--tokenizer", "char", "--val-fraction",
                       "0.1", "--out", data.string()},
            dir / "prepare.log")
        != 0) {
        std::fprintf(stderr, "crowdtrain-prepare failed; see %s\n", (dir / "prepare.log").c_str());
        return 1;
    }
    const auto spec = writeSpec(dir, data, o.model, o.tasksPerRound);

    std::vector<Row> rows;
    for (int n : counts)
        rows.push_back(measure(n, o, dir, spec));

    std::printf("Heartbeat every %d ms; %.0f%% of volunteers train (task, %d ms of \"compute\", upload, submit); "
                "%d tasks per round; %d client threads; %d s windows.\n\n",
        o.heartbeatMs, o.trainerFraction * 100, o.computeMs, o.tasksPerRound, o.threads, o.seconds);
    std::printf("| volunteers | requests/s | p50 ms | p99 ms | server RSS MiB | held (p99 < 50 ms) |\n");
    std::printf("|---:|---:|---:|---:|---:|---|\n");
    for (const Row& r : rows)
        std::printf("| %d | %.0f | %s | %s | %.1f | %s |\n", r.volunteers, r.repliesPerSecond, ms(r.p50).c_str(),
            ms(r.p99).c_str(), r.rssMiB, r.p99 < 50.0 ? "yes" : "no");
    std::printf("\n| volunteers | server CPU (cores) | bench CPU (cores) | server VmHWM MiB | rounds closed | "
                "submits accepted | errors | unanswered |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (const Row& r : rows)
        std::printf("| %d | %.2f | %.2f | %.1f | %lld | %lld | %lld | %lld |\n", r.volunteers, r.serverCpu, r.clientCpu,
            r.hwmMiB, static_cast<long long>(r.rounds), static_cast<long long>(r.accepted),
            static_cast<long long>(r.errors), static_cast<long long>(r.unanswered));
    std::printf("\nPer request type, p50 / p99 ms (count):\n\n| volunteers |");
    for (int k = 0; k < kKinds; ++k)
        std::printf(" %s |", kKindNames[k]);
    std::printf("\n|---:|");
    for (int k = 0; k < kKinds; ++k)
        std::printf("---:|");
    std::printf("\n");
    for (Row& r : rows) {
        std::printf("| %d |", r.volunteers);
        for (int k = 0; k < kKinds; ++k)
            std::printf(" %s / %s (%zu) |", ms(percentile(r.latencies[k], 0.5)).c_str(),
                ms(percentile(r.latencies[k], 0.99)).c_str(), r.latencies[k].size());
        std::printf("\n");
    }
    std::printf("\n(join: over the whole ramp, not only the window; not part of p50/p99 above)\n");
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    return 0;
}
