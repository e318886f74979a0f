#pragma once

// bench_coordinator_scale's server side: Tiny Shakespeare prepared with
// crowdtrain-prepare, a small project spec, and a crowdtrain-server child
// process on loopback whose first stdout line gives its key and endpoint.
// No Qt: posix_spawn and a pipe.

#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <spawn.h>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

extern char** environ;

namespace crowdtrain::bench {

inline std::filesystem::path binary(const char* name)
{
    return std::filesystem::path(CROWDTRAIN_BIN_DIR) / name;
}

// Runs a program to completion with stdout/stderr sent to `log`; its exit code (-1 on failure).
inline int runProgram(const std::vector<std::string>& argv, const std::filesystem::path& log)
{
    const std::string command = [&] {
        std::string c;
        for (const std::string& a : argv)
            c += "'" + a + "' ";
        return c + "> '" + log.string() + "' 2>&1";
    }();
    const int status = std::system(command.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

struct ModelSize {
    int64_t nLayer = 2;
    int64_t nEmbd = 32;
};

// A round's token target of `tasksPerRound` tasks: rounds close now and then.
inline std::filesystem::path writeSpec(
    const std::filesystem::path& dir, const std::filesystem::path& data, ModelSize model, int64_t tasksPerRound)
{
    const int64_t block = 32, steps = 20, batch = 8;
    nlohmann::json spec = {{"name", "tiny"}, {"description", "coordinator scale benchmark"},
        {"model",
            {{"n_layer", model.nLayer}, {"n_head", 2}, {"n_embd", model.nEmbd}, {"block_size", block},
                {"vocab_size", 65}}},
        {"data", data.string()}, {"init", {{"seed", 7}}},
        {"inner",
            {{"steps", steps}, {"batch_size", batch}, {"learning_rate", 2e-3}, {"min_lr", 2e-4}, {"warmup_iters", 5},
                {"beta1", 0.9}, {"beta2", 0.99}, {"weight_decay", 0.1}, {"grad_clip", 1.0}}},
        {"round", {{"token_target", tasksPerRound * steps * batch * block}, {"deadline_seconds", 60}}},
        {"codec", "int8"}, {"checkpoints", {{"every_rounds", 5}, {"keep_last", 2}}},
        {"validation", {{"batches", 8}, {"batch_size", 16}}}};
    const auto file = dir / "tiny.project.json";
    std::ofstream(file) << spec.dump(2);
    return file;
}

class ServerProcess {
public:
    ServerProcess() = default;
    ServerProcess(const ServerProcess&) = delete;
    ServerProcess& operator=(const ServerProcess&) = delete;
    ~ServerProcess() { stop(); }

    // Starts the server and reads its first line; false (and a message on stderr) on failure.
    bool start(const std::filesystem::path& spec, const std::filesystem::path& state, int heartbeatMs,
        const std::filesystem::path& log)
    {
        int out[2];
        if (::pipe(out) != 0)
            return false;
        posix_spawn_file_actions_t actions;
        posix_spawn_file_actions_init(&actions);
        posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
        posix_spawn_file_actions_addclose(&actions, out[0]);
        posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        std::vector<std::string> args = {binary("crowdtrain-server").string(), spec.string(), "--state", state.string(),
            "--bind", "tcp://127.0.0.1:*", "--publish", "tcp://127.0.0.1:*", "--heartbeat-ms",
            std::to_string(heartbeatMs), "--threads", "1"};
        std::vector<char*> argv;
        for (std::string& a : args)
            argv.push_back(a.data());
        argv.push_back(nullptr);
        const int rc = posix_spawn(&m_pid, argv[0], &actions, nullptr, argv.data(), environ);
        posix_spawn_file_actions_destroy(&actions);
        ::close(out[1]);
        if (rc != 0) {
            ::close(out[0]);
            m_pid = 0;
            return false;
        }
        std::string line;
        char c = 0;
        while (::read(out[0], &c, 1) == 1 && c != '\n')
            line += c;
        m_stdout = out[0]; // kept open so that the server's later prints never hit a closed pipe
        const auto json = nlohmann::json::parse(line, nullptr, false);
        if (json.is_discarded() || !json.contains("public_key")) {
            std::fprintf(stderr, "crowdtrain-server did not start (see %s): %s\n", log.c_str(), line.c_str());
            return false;
        }
        publicKey = json.at("public_key").get<std::string>();
        endpoint = json.at("requests").get<std::string>();
        return true;
    }

    void stop()
    {
        if (m_pid > 0) {
            ::kill(m_pid, SIGTERM);
            int status = 0;
            ::waitpid(m_pid, &status, 0);
            m_pid = 0;
        }
        if (m_stdout >= 0)
            ::close(m_stdout);
        m_stdout = -1;
    }

    pid_t pid() const { return m_pid; }

    // A "VmRSS:"/"VmHWM:" figure of /proc/<pid>/status in MiB.
    double memoryMiB(const char* field) const
    {
        std::ifstream status("/proc/" + std::to_string(m_pid) + "/status");
        std::string line;
        while (std::getline(status, line))
            if (line.rfind(field, 0) == 0)
                return std::strtod(line.c_str() + std::string(field).size(), nullptr) / 1024.0;
        return 0.0;
    }

    // utime + stime in seconds.
    double cpuSeconds() const
    {
        std::ifstream stat("/proc/" + std::to_string(m_pid) + "/stat");
        std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
        const auto close = text.rfind(')');
        if (close == std::string::npos)
            return 0.0;
        std::istringstream fields(text.substr(close + 2));
        std::string skip;
        for (int i = 0; i < 11; ++i) // state .. cmajflt: fields 3..13
            fields >> skip;
        double utime = 0, stime = 0;
        fields >> utime >> stime;
        return (utime + stime) / double(::sysconf(_SC_CLK_TCK));
    }

    std::string publicKey;
    std::string endpoint;

private:
    pid_t m_pid = 0;
    int m_stdout = -1;
};

} // namespace crowdtrain::bench
