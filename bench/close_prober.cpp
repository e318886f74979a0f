// The coordinator's loop as a volunteer sees it while rounds close (issue
// 41): joins a project, heartbeats every PERIOD_MS (50), each heartbeat sent
// when the last reply came plus the period, and records the longest
// unanswered interval (from a heartbeat's send to its reply) and the longest
// time between two replies. Runs until STOP_FILE exists (or SIGTERM), then
// prints one JSON line:
//   {"heartbeats": N, "max_rtt_ms": X, "p99_rtt_ms": X, "max_gap_ms": X,
//    "failed": N, "version": V}
//
//   bench_close_prober ENDPOINT PROJECT SERVER_KEY STOP_FILE [PERIOD_MS]
#include "net/transport/client.h"
#include "net/transport/curve_keys.h"
#include "net/wire/messages.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

namespace {

std::atomic<bool> g_stop{false};

void onSignal(int)
{
    g_stop = true;
}

double msSince(std::chrono::steady_clock::time_point from, std::chrono::steady_clock::time_point to)
{
    return std::chrono::duration<double, std::milli>(to - from).count();
}

} // namespace

int main(int argc, char** argv)
{
    using namespace crowdtrain;
    using Clock = std::chrono::steady_clock;
    if (argc < 5) {
        std::fprintf(stderr, "usage: bench_close_prober ENDPOINT PROJECT SERVER_KEY STOP_FILE [PERIOD_MS]\n");
        return 2;
    }
    const std::string endpoint = argv[1], project = argv[2], serverKey = argv[3];
    const std::filesystem::path stopFile = argv[4];
    const int periodMs = argc > 5 ? std::max(1, std::atoi(argv[5])) : 50;
    std::signal(SIGTERM, onSignal);
    std::signal(SIGINT, onSignal);
    zmq::context_t context;
    auto keys = net::generateKeyPair();
    if (!keys)
        return 1;
    auto client = net::Client::connect(context, {endpoint, serverKey, *keys});
    if (!client) {
        std::fprintf(stderr, "bench_close_prober: %s\n", client.error().message.c_str());
        return 1;
    }
    auto joined = (*client)->request<net::JoinReply>(net::JoinRequest{project, "prober", "bench", "CPU"}, 30000);
    if (!joined) {
        std::fprintf(stderr, "bench_close_prober: join: %s\n", joined.error().message.c_str());
        return 1;
    }
    std::vector<double> rtts;
    std::vector<std::pair<double, double>> worst; // (rtt ms, Unix time sent, s), the slowest kWorst
    constexpr std::size_t kWorst = 5;
    double maxGap = 0;
    uint64_t failed = 0, version = joined->version;
    Clock::time_point lastReply = Clock::now();
    while (!g_stop && !std::filesystem::exists(stopFile)) {
        std::this_thread::sleep_until(lastReply + std::chrono::milliseconds(periodMs));
        const Clock::time_point sent = Clock::now();
        auto reply
            = (*client)->request<net::HeartbeatReply>(net::HeartbeatRequest{project, joined->session, version}, 60000);
        const Clock::time_point now = Clock::now();
        if (!reply) {
            ++failed;
            std::fprintf(stderr, "bench_close_prober: heartbeat: %s\n", reply.error().message.c_str());
        } else {
            version = reply->version; // as a volunteer that keeps up would hold
        }
        rtts.push_back(msSince(sent, now));
        worst.emplace_back(rtts.back(),
            std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count()
                - msSince(sent, now) / 1e3);
        std::sort(worst.begin(), worst.end(), std::greater<>());
        if (worst.size() > kWorst)
            worst.pop_back();
        maxGap = std::max(maxGap, msSince(lastReply, now));
        lastReply = now;
    }
    std::sort(rtts.begin(), rtts.end());
    const double maxRtt = rtts.empty() ? 0 : rtts.back();
    const double p99 = rtts.empty() ? 0 : rtts[std::min(rtts.size() - 1, rtts.size() * 99 / 100)];
    const auto over100 = std::count_if(rtts.begin(), rtts.end(), [](double ms) { return ms >= 100.0; });
    std::string slowest;
    for (const auto& [ms, at] : worst)
        slowest += (slowest.empty() ? "" : ", ") + ("[" + std::to_string(ms) + ", " + std::to_string(at) + "]");
    std::printf("{\"heartbeats\": %zu, \"max_rtt_ms\": %.1f, \"p99_rtt_ms\": %.1f, \"max_gap_ms\": %.1f, "
                "\"failed\": %llu, \"version\": %llu, \"over_100_ms\": %lld, \"slowest\": [%s]}\n",
        rtts.size(), maxRtt, p99, maxGap, static_cast<unsigned long long>(failed),
        static_cast<unsigned long long>(version), static_cast<long long>(over100), slowest.c_str());
    (void)(*client)->request<net::LeaveReply>(net::LeaveRequest{project, joined->session}, 2000);
    return failed == 0 ? 0 : 1;
}
