// crowdtrain-worker: the volunteer daemon (docs/architecture.md,
// "Processes"). Headless: joins one project on a coordinator and trains for
// it until SIGINT/SIGTERM or a limit, logging progress to stderr and a
// one-line JSON summary to stdout.
#include "app/args.h"
#include "engine/cpu_runtime.h"
#include "net/volunteer/agent.h"

#include <chrono>
#include <csignal>
#include <ctime>
#include <iostream>

namespace {

crowdtrain::volunteer::VolunteerAgent* g_agent = nullptr;

void onSignal(int)
{
    if (g_agent)
        g_agent->stop();
}

void logLine(const std::string& line)
{
    const std::time_t now = std::time(nullptr);
    char stamp[16];
    std::strftime(stamp, sizeof stamp, "%H:%M:%S", std::localtime(&now));
    std::cerr << stamp << ' ' << line << '\n';
}

int usageError(const std::string& message)
{
    std::cerr << "crowdtrain-worker: " << message << " (see --help)\n";
    return 2;
}

} // namespace

int main(int argc, char** argv)
{
    using namespace crowdtrain;
    engine::prepareCpuRuntime(argv);
    app::Args args("crowdtrain-worker", "the Crowdtrain volunteer daemon",
        "  crowdtrain-worker join ENDPOINT PROJECT --server-key KEY --data DIR\n"
        "      train as a volunteer of PROJECT at ENDPOINT (e.g. tcp://127.0.0.1:7400) until SIGINT/SIGTERM;\n"
        "      prints a one-line JSON summary at exit");
    args.option("server-key", "the coordinator's public key: 40 Z85 characters, or @FILE");
    args.option("data", "the project's prepared data folder (its token shards)");
    args.option("data-dir", "folder for the volunteer's key pair and state", "$XDG_DATA_HOME/crowdtrain");
    args.option("name", "display name shown on the project's leaderboard");
    args.option("threads", "CPU threads for training (0 = all cores)", "0");
    args.option("device", "cpu, cuda, cuda:N or auto", "cpu");
    args.option("max-tasks", "stop after this many submitted tasks (0 = never)", "0");
    args.option("max-rounds", "stop after the model advanced this many versions (0 = never)", "0");
    if (auto exitCode = args.parse(app::argumentsOf(argc, argv)))
        return *exitCode;
    const auto& positionals = args.positionals();
    if (positionals.empty() || positionals[0] != "join")
        return usageError("the command is: join ENDPOINT PROJECT");
    if (positionals.size() != 3)
        return usageError("join takes ENDPOINT and PROJECT");
    if (!args.has("server-key"))
        return usageError("--server-key is required");
    if (!args.has("data"))
        return usageError("--data DIR (the project's prepared data folder) is required");
    const long long threads = args.integer("threads");
    const long long maxTasks = args.integer("max-tasks");
    const long long maxRounds = args.integer("max-rounds");
    if (threads < 0 || maxTasks < 0 || maxRounds < 0)
        return usageError("--threads, --max-tasks and --max-rounds take numbers >= 0");
    engine::configureCpuThreads(int(threads));

    volunteer::AgentOptions options;
    options.endpoint = positionals[1];
    options.project = positionals[2];
    options.serverKey = args.value("server-key");
    options.preparedDataDir = args.value("data");
    if (args.has("data-dir"))
        options.dataDir = args.value("data-dir");
    options.displayName = args.value("name");
    options.device = args.value("device");
    options.threads = int(threads);
    options.maxTasks = uint64_t(maxTasks);
    options.maxRounds = uint64_t(maxRounds);
    options.log = logLine;

    volunteer::VolunteerAgent agent(options);
    g_agent = &agent;
    struct sigaction action { };
    action.sa_handler = onSignal;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, nullptr);
    sigaction(SIGTERM, &action, nullptr);

    const Status ran = agent.run();
    g_agent = nullptr;
    const volunteer::AgentSummary summary = agent.summary();
    logLine("tasks " + std::to_string(summary.tasks) + ", accepted " + std::to_string(summary.accepted) + ", rejected "
        + std::to_string(summary.rejected)
        + (summary.unconfirmed ? ", unconfirmed " + std::to_string(summary.unconfirmed) : std::string())
        + ", utilisation " + std::to_string(int(summary.utilisation() * 100 + 0.5)) + "%");
    std::cout << summary.toJson() << std::endl;
    if (!ran) {
        std::cerr << "crowdtrain-worker: " << ran.error().message << " (" << ran.error().code << ")\n";
        return 1;
    }
    return 0;
}
