// A hostile volunteer for the coordinator's robustness benchmark
// (bench/attack_swarm.sh): the real volunteer agent, which trains its tasks
// honestly and then, before encoding, replaces its pseudo-gradient with
//   zeros        - all zeros (a free ride, and a drag on the norm statistics),
//   noise        - Gaussian noise of 3.9x its honest norm (just under the
//                  gate's 4x ceiling, as an attacker estimating the median
//                  would send),
//   flip         - its honest update with the sign flipped,
//   big          - its honest update times HOSTILE_SCALE (environment,
//                  default 20; a Sybil setting the norm),
//   ramp         - its honest update times 3.5^k at its k-th hostile task,
//   concentrated - 3x its honest norm, all on element 0 (wte[0]),
//   flat         - its honest update's signs, every element the same
//                  magnitude, HOSTILE_SCALE x its honest norm in all (no
//                  element stands out: only the norm reference stops it).
// HOSTILE_AFTER=N (environment, default 0): its first N tasks are honest
// (a key that earns trust, then attacks).
//
//   bench_hostile_worker ENDPOINT PROJECT SERVER_KEY DATA_DIR STATE_DIR MODE

#include "net/volunteer/agent.h"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <set>
#include <string>

namespace {

crowdtrain::volunteer::VolunteerAgent* g_agent = nullptr;

void onSignal(int)
{
    if (g_agent)
        g_agent->stop();
}

} // namespace

int main(int argc, char** argv)
{
    using namespace crowdtrain;
    if (argc != 7) {
        std::fprintf(stderr,
            "usage: %s ENDPOINT PROJECT SERVER_KEY DATA_DIR STATE_DIR zeros|noise|flip|big|ramp|concentrated|flat\n",
            argv[0]);
        return 2;
    }
    const std::string mode = argv[6];
    const std::set<std::string> modes{"zeros", "noise", "flip", "big", "ramp", "concentrated", "flat"};
    if (!modes.contains(mode)) {
        std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
        return 2;
    }
    volunteer::AgentOptions options;
    options.endpoint = argv[1];
    options.project = argv[2];
    options.serverKey = argv[3];
    options.preparedDataDir = argv[4];
    options.dataDir = argv[5];
    options.displayName = "hostile-" + mode;
    options.threads = 1;
    options.log = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
    std::mt19937 rng(20261124);
    const char* after = std::getenv("HOSTILE_AFTER");
    const long honestTasks = after ? std::strtol(after, nullptr, 10) : 0;
    long tasks = 0;
    const char* scaleText = std::getenv("HOSTILE_SCALE");
    const float bigScale = scaleText ? std::strtof(scaleText, nullptr) : 20.0f;
    options.alterPseudoGradient = [mode, honestTasks, bigScale, &tasks, &rng](std::vector<float>& delta) {
        if (tasks++ < honestTasks)
            return;
        const long hostile = tasks - honestTasks; // 1, 2, ...
        double norm = 0;
        for (float x : delta)
            norm += double(x) * double(x);
        norm = std::sqrt(norm);
        if (mode == "zeros") {
            std::fill(delta.begin(), delta.end(), 0.0f);
        } else if (mode == "flip") {
            for (float& x : delta)
                x = -x;
        } else if (mode == "big" || mode == "ramp") {
            const float scale = mode == "big" ? bigScale : float(std::pow(3.5, double(hostile - 1)));
            for (float& x : delta)
                x *= scale;
        } else if (mode == "flat") {
            const float each = float(bigScale * norm / std::sqrt(double(std::max<std::size_t>(delta.size(), 1))));
            for (float& x : delta)
                x = x < 0 ? -each : each;
        } else if (mode == "concentrated") {
            std::fill(delta.begin(), delta.end(), 0.0f);
            if (!delta.empty())
                delta[0] = float(3.0 * norm);
        } else {
            const double sigma = 3.9 * norm / std::sqrt(double(std::max<std::size_t>(delta.size(), 1)));
            std::normal_distribution<float> normal(0.0f, float(sigma));
            for (float& x : delta)
                x = normal(rng);
        }
    };
    volunteer::VolunteerAgent agent(options);
    g_agent = &agent;
    std::signal(SIGINT, onSignal);
    std::signal(SIGTERM, onSignal);
    const Status ran = agent.run();
    g_agent = nullptr;
    std::printf("%s\n", agent.summary().toJson().c_str());
    if (!ran)
        std::fprintf(stderr, "hostile worker: %s\n", ran.error().message.c_str());
    return ran ? 0 : 1;
}
