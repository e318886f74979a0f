// The daemon's memory with clients that never read their replies (issue
// 24): 20 DEALERs each send R requests for a reply of a few KiB
// (settings_get) and never read; the daemon's resident memory is read
// before, while they are connected, after they left, and 10 s later.
// Starts its own daemon (crowdtrain-worker run) in a temporary folder.
//
//   bench_unread_clients BIN_DIR [REQUESTS_PER_CLIENT]
#include "net/control/control_client.h"
#include "net/control/control_envelope.h"
#include "net/control/control_paths.h"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <spawn.h>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>
#include <zmq.hpp>

extern char** environ;

namespace {

using namespace crowdtrain;
namespace fs = std::filesystem;

double residentMiB(pid_t pid)
{
    std::ifstream status("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(status, line))
        if (line.rfind("VmRSS:", 0) == 0)
            return double(std::stoull(line.substr(6))) / 1024.0;
    return 0;
}

} // namespace

int main(int argc, char** argv)
{
    if (argc < 2) {
        std::fprintf(stderr, "usage: bench_unread_clients BIN_DIR [REQUESTS_PER_CLIENT]\n");
        return 2;
    }
    const fs::path bin = argv[1];
    const int requests = argc > 2 ? std::atoi(argv[2]) : 300;
    char pattern[] = "/tmp/bench-unread-XXXXXX";
    const fs::path root = ::mkdtemp(pattern);
    fs::create_directories(root / "run");
    const fs::path controlDir = root / "run" / "crowdtrain";
    const std::string worker = (bin / "crowdtrain-worker").string();
    std::vector<std::string> args = {worker, "run", "--data-dir", (root / "data").string(), "--config-dir",
        (root / "config").string(), "--control-dir", controlDir.string()};
    std::vector<char*> argvDaemon;
    for (std::string& a : args)
        argvDaemon.push_back(a.data());
    argvDaemon.push_back(nullptr);
    posix_spawn_file_actions_t files;
    posix_spawn_file_actions_init(&files);
    posix_spawn_file_actions_addopen(&files, 2, (root / "daemon.log").c_str(), O_WRONLY | O_CREAT, 0600);
    pid_t daemon = -1;
    if (posix_spawn(&daemon, argvDaemon[0], &files, nullptr, argvDaemon.data(), environ) != 0)
        return 1;
    std::unique_ptr<control::ControlClient> client;
    for (int i = 0; i < 600 && !(client && client->call("status", control::Value::map(), 1000)); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        if (!client)
            if (auto c = control::ControlClient::connect(controlDir))
                client = std::move(*c);
    }
    if (!client)
        return 1;
    auto reply = client->call("settings_get");
    const std::size_t replyBytes = reply ? control::encode(*reply).size() : 0;
    std::this_thread::sleep_for(std::chrono::seconds(2));
    const double before = residentMiB(daemon);
    {
        zmq::context_t context;
        std::vector<zmq::socket_t> sockets;
        for (int c = 0; c < 20; ++c) {
            sockets.emplace_back(context, zmq::socket_type::dealer);
            sockets.back().set(zmq::sockopt::linger, 0);
            sockets.back().set(zmq::sockopt::sndhwm, 0);
            sockets.back().set(zmq::sockopt::rcvhwm, 1);
            sockets.back().set(zmq::sockopt::rcvbuf, 4096);
            sockets.back().connect(control::controlEndpoint(controlDir));
        }
        for (int k = 0; k < requests; ++k)
            for (auto& s : sockets)
                s.send(zmq::buffer(control::encodeRequest("settings_get", uint64_t(k + 1), control::Value::map())),
                    zmq::send_flags::dontwait);
        std::this_thread::sleep_for(std::chrono::seconds(5));
        const double connected = residentMiB(daemon);
        std::printf(
            "| clients | requests each | reply bytes | before MiB | connected MiB | left MiB | 10 s later MiB |\n"
            "|---|---|---|---|---|---|---|\n| 20 | %d | %zu | %.1f | %.1f |",
            requests, replyBytes, before, connected);
    }
    std::this_thread::sleep_for(std::chrono::seconds(5));
    std::printf(" %.1f |", residentMiB(daemon));
    std::this_thread::sleep_for(std::chrono::seconds(10));
    std::printf(" %.1f |\n", residentMiB(daemon));
    ::kill(daemon, SIGTERM);
    int status = 0;
    waitpid(daemon, &status, 0);
    std::error_code ec;
    fs::remove_all(root, ec);
    return 0;
}
