// crowdtrain-daemon: the volunteer daemon's process (docs/architecture.md,
// "Processes"). Users start it through `crowdtrain-worker run` / `demo`
// (or the desktop app, or the systemd user unit); it is a program of its
// own so that the command-line client never loads libtorch.
//   crowdtrain-daemon run      serve the control API until SIGINT/SIGTERM
//   crowdtrain-daemon demo     the same, with the local demo project joined,
//                              printing progress in plain words
//   crowdtrain-daemon join ENDPOINT PROJECT --server-key KEY [--data DIR]
//                              one project, no control API (hosts, benchmarks)
#include "app/args.h"
#include "app/daemon_options.h"
#include "core/file_io.h"
#include "net/control/control_names.h"
#include "net/control/control_paths.h"
#include "net/daemon/daemon.h"
#include "net/daemon/daemon_paths.h"
#include "net/limits/machine.h"
#include "net/volunteer/agent.h"

#include <cerrno>
#include <charconv>
#include <chrono>
#include <csignal>
#include <ctime>
#include <fcntl.h>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unistd.h>

namespace {

using namespace crowdtrain;

void logLine(const std::string& line)
{
    const std::time_t now = std::time(nullptr);
    char stamp[16];
    std::strftime(stamp, sizeof stamp, "%H:%M:%S", std::localtime(&now));
    std::cerr << stamp << ' ' << line << '\n';
}

int fail(const std::string& message, int code = 1)
{
    std::cerr << "crowdtrain-worker: " << message << "\n";
    return code;
}

// SIGINT and SIGTERM, in whichever thread they land (libtorch and OpenBLAS
// start threads of their own, some before main), write a byte to a pipe;
// one thread reads it and calls `onStop` (never from the handler: stopping
// takes locks).
int g_stopPipe[2] = {-1, -1};

void onStopSignal(int)
{
    const char stop = 1;
    (void)!::write(g_stopPipe[1], &stop, 1);
}

class StopSignals {
public:
    StopSignals()
    {
        if (::pipe2(g_stopPipe, O_CLOEXEC) != 0)
            return;
        struct sigaction action { };
        action.sa_handler = onStopSignal;
        sigemptyset(&action.sa_mask);
        action.sa_flags = SA_RESTART;
        ::sigaction(SIGINT, &action, nullptr);
        ::sigaction(SIGTERM, &action, nullptr);
    }
    void onStop(std::function<void()> stop)
    {
        m_thread = std::thread([stop = std::move(stop)] {
            char byte = 0;
            while (::read(g_stopPipe[0], &byte, 1) < 0 && errno == EINTR) { }
            if (byte == 1)
                stop();
        });
    }
    // Waits for the reader: once a signal's `stop` has returned, or at
    // once when none came. Before what `stop` uses is destroyed: a signal
    // makes run() return while its thread is still inside stop().
    void finish()
    {
        if (m_thread.joinable()) {
            const char quit = 0; // no signal came: the reader just returns
            (void)!::write(g_stopPipe[1], &quit, 1);
            m_thread.join();
        }
    }
    ~StopSignals() { finish(); }

private:
    std::thread m_thread;
};

// A program of ours: beside this one (the build tree), else in the bin
// folder of the prefix this one is installed under (PREFIX/libexec/crowdtrain).
std::filesystem::path siblingProgram(const char* name)
{
    std::error_code ec;
    const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    const auto beside = self.parent_path() / name;
    const auto installed = self.parent_path().parent_path().parent_path() / "bin" / name;
    return std::filesystem::exists(beside, ec) || !std::filesystem::exists(installed, ec) ? beside : installed;
}

std::string demoLine(const control::Value& s)
{
    char line[256];
    const auto state = control::parseDaemonState(s["state"].toString());
    if (state == control::DaemonState::Training || state == control::DaemonState::Waiting)
        std::snprintf(line, sizeof line, "%s · round %llu · step %llu/%llu · loss %.3f · %.0f tokens/s",
            s["text"].toString().c_str(), static_cast<unsigned long long>(s["round"].toUInt()),
            static_cast<unsigned long long>(s["step"].toUInt()), static_cast<unsigned long long>(s["steps"].toUInt()),
            s["loss"].toDouble(), s["tokens_per_second"].toDouble());
    else
        std::snprintf(line, sizeof line, "%s", s["text"].toString().c_str());
    return line;
}

int serve(app::Args& args, bool demo)
{
    daemon::DaemonOptions options;
    auto dataDir
        = args.has("data-dir") ? Result<std::filesystem::path>(args.value("data-dir")) : daemon::defaultDaemonDataDir();
    auto configDir
        = args.has("config-dir") ? Result<std::filesystem::path>(args.value("config-dir")) : daemon::defaultConfigDir();
    auto controlDir = args.has("control-dir") ? Result<std::filesystem::path>(args.value("control-dir"))
                                              : control::defaultControlDir();
    for (const auto* dir : {&dataDir, &configDir, &controlDir})
        if (!*dir)
            return fail(dir->error().message);
    options.dataDir = *dataDir;
    options.configDir = *configDir;
    options.controlDir = *controlDir;
    options.serverBinary = siblingProgram("crowdtrain-server");
    options.prepareBinary = siblingProgram("crowdtrain-prepare");
    if (args.has("demo-corpus"))
        options.demoCorpusDir = args.value("demo-corpus");
    options.log = logLine;
    StopSignals signals;
    auto opened = daemon::Daemon::open(std::move(options));
    if (!opened)
        return fail(opened.error().message, opened.error().code == control::errc::kAlreadyRunning ? 3 : 1);
    daemon::Daemon& d = **opened;
    signals.onStop([&] { d.stop(); });
    std::thread reporter;
    std::atomic<bool> done{false};
    std::atomic<bool> demoFailed{false};
    if (demo) {
        std::cout << "Crowdtrain demo: training a small GPT on this computer (Ctrl-C stops it).\n"
                     "In another terminal, `crowdtrain-worker status` shows it too.\n"
                  << std::flush;
        // The join waits for the demo hub to start (up to two minutes)
        // while this thread serves the control API.
        reporter = std::thread([&] {
            if (Status joined = d.join("demo", daemon::kDemoProject); !joined) {
                if (!done)
                    fail("cannot start the demo: " + joined.error().message);
                demoFailed = true;
                d.stop();
                return;
            }
            std::string last;
            while (!done) {
                const std::string line = demoLine(d.status());
                if (line != last)
                    std::cout << line << std::endl;
                last = line;
                for (int i = 0; i < 20 && !done; ++i)
                    std::this_thread::sleep_for(std::chrono::milliseconds(100));
            }
        });
    }
    const Status served = d.run();
    done = true;
    if (!served)
        d.stop(); // the demo's join returns (its queue stops) and its thread ends
    if (reporter.joinable())
        reporter.join();
    signals.finish();
    opened->reset();
    if (!served)
        return fail("the control server failed: " + served.error().message);
    return demoFailed ? 1 : 0;
}

// Rewrites the summary file when the phase or the judged tasks change (not
// on every inner step), atomically, so a run killed at any point leaves the
// counts of its last phase.
std::function<void(const volunteer::AgentSummary&)> summaryWriter(std::filesystem::path file)
{
    struct Last {
        std::mutex mutex;
        std::optional<volunteer::AgentPhase> phase;
        uint64_t tasks = 0;
    };
    auto last = std::make_shared<Last>();
    return [file = std::move(file), last](const volunteer::AgentSummary& summary) {
        std::lock_guard lock(last->mutex);
        if (summary.phase == last->phase && summary.tasks == last->tasks)
            return;
        last->phase = summary.phase;
        last->tasks = summary.tasks;
        if (Status written = core::writeFileAtomic(file, summary.toJson() + "\n"); !written)
            logLine("cannot write the summary file: " + written.error().message);
    };
}

int joinOne(app::Args& args)
{
    const auto& positionals = args.positionals();
    if (positionals.size() != 3)
        return fail("join takes ENDPOINT and PROJECT", 2);
    volunteer::AgentOptions options;
    options.endpoint = positionals[1];
    options.project = positionals[2];
    options.serverKey = args.value("server-key");
    if (args.has("data"))
        options.preparedDataDir = args.value("data");
    if (args.has("data-dir"))
        options.dataDir = args.value("data-dir");
    options.displayName = args.value("name");
    options.device = args.value("device");
    options.devices = limits::splitList(args.value("devices"));
    // A GPU asked for: the CUDA core when it is installed and finds one.
    options.tryCudaCore = options.device != "cpu";
    options.threads = int(args.integer("threads"));
    options.maxTasks = uint64_t(std::max(0LL, args.integer("max-tasks")));
    options.maxRounds = uint64_t(std::max(0LL, args.integer("max-rounds")));
    options.overlap = args.isSet("overlap");
    options.log = logLine;
    if (args.has("summary-file"))
        options.published = summaryWriter(args.value("summary-file"));
    // The full state through the hub's swarm: a session of our own, started
    // when the hub first offers a state torrent; it outlives the agent.
    std::unique_ptr<swarm::SwarmSession> swarmSession;
    if (const std::string port = args.value("swarm-port"); port != "off") {
        swarm::SwarmSettings settings;
        int value = -1;
        if (auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
            ec != std::errc() || end != port.data() + port.size() || value < 0 || value > 65535)
            return fail("--swarm-port takes a port (0-65535) or off", 2);
        settings.listenPort = uint16_t(value);
        options.swarm = [&swarmSession, settings, tried = false]() mutable -> swarm::SwarmSession* {
            if (!tried) {
                tried = true;
                if (auto started = swarm::SwarmSession::start(settings)) {
                    swarmSession = std::move(*started);
                    logLine(
                        "sharing the model state (BitTorrent) on port " + std::to_string(swarmSession->listenPort()));
                } else {
                    logLine("no swarm: " + started.error().message);
                }
            }
            return swarmSession.get();
        };
    }
    StopSignals signals;
    volunteer::VolunteerAgent agent(options);
    signals.onStop([&] { agent.stop(); });
    const Status ran = agent.run();
    signals.finish();
    const volunteer::AgentSummary summary = agent.summary();
    logLine("tasks " + std::to_string(summary.tasks) + ", accepted " + std::to_string(summary.accepted) + ", rejected "
        + std::to_string(summary.rejected)
        + (summary.unconfirmed ? ", unconfirmed " + std::to_string(summary.unconfirmed) : std::string())
        + ", utilisation " + std::to_string(int(summary.utilisation() * 100 + 0.5)) + "%");
    std::cout << summary.toJson() << std::endl;
    if (!ran)
        return fail(ran.error().message + " (" + ran.error().code + ")");
    return 0;
}

} // namespace

int main(int argc, char** argv)
{
    app::Args args("crowdtrain-daemon", "the Crowdtrain volunteer daemon (started by crowdtrain-worker)",
        "  crowdtrain-daemon run | demo | join ENDPOINT PROJECT --server-key KEY [--data DIR]");
    app::declareDaemonOptions(args);
    if (auto exitCode = args.parse(app::argumentsOf(argc, argv)))
        return *exitCode;
    const auto& positionals = args.positionals();
    const std::string command = positionals.empty() ? "" : positionals[0];
    if (command == "run" || command == "demo")
        return serve(args, command == "demo");
    if (command == "join") {
        if (!args.has("server-key"))
            return fail("join needs --server-key", 2);
        return joinOne(args);
    }
    return fail("the command is run, demo or join (see --help)", 2);
}
