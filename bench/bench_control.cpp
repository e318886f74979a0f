// The control API's round trip as the desktop app sees it: N `status`
// requests to a running daemon (crowdtrain-worker run), one at a time, and
// the p50/p99/max of their latency. Links only crowdtrain::control.
//
//   bench_control CONTROL_DIR [N]
#include "net/control/control_client.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

int main(int argc, char** argv)
{
    using namespace crowdtrain;
    if (argc < 2) {
        std::fprintf(stderr, "usage: bench_control CONTROL_DIR [N]\n");
        return 2;
    }
    const int n = argc > 2 ? std::atoi(argv[2]) : 1000;
    auto client = control::ControlClient::connect(argv[1]);
    if (!client) {
        std::fprintf(stderr, "bench_control: %s\n", client.error().message.c_str());
        return 1;
    }
    std::vector<double> ms;
    std::string state;
    for (int i = 0; i < n; ++i) {
        const auto start = std::chrono::steady_clock::now();
        auto reply = (*client)->call("status");
        const auto end = std::chrono::steady_clock::now();
        if (!reply) {
            std::fprintf(stderr, "bench_control: %s\n", reply.error().message.c_str());
            return 1;
        }
        state = (*reply)["state"].toString();
        ms.push_back(std::chrono::duration<double, std::milli>(end - start).count());
    }
    std::sort(ms.begin(), ms.end());
    auto at = [&](double q) { return ms[std::min(ms.size() - 1, std::size_t(q * double(ms.size())))]; };
    std::printf("| requests | daemon state | p50 ms | p99 ms | max ms |\n| ---: | --- | ---: | ---: | ---: |\n");
    std::printf("| %d | %s | %.3f | %.3f | %.3f |\n", n, state.c_str(), at(0.5), at(0.99), ms.back());
    return 0;
}
