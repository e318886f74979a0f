// `crowdtrain-worker status` as a user types it, while the daemon is busy
// elsewhere (issue 24): p50/p99/max of the whole command (process start,
// connect, request, reply) and of one ControlClient::call, in three
// situations: idle; following six hubs that never answer while a catalog
// refresh (2 s per hub, in turn) is always in flight; and while a join of
// the demo is starting its coordinator. Issue 43 added: the swarm starting
// (seeding turned on with eight downloaded checkpoints planted: the
// libtorrent session starts and adds them), and a slow disk (the demo
// training, its traffic counted into data_usage.json with an fsync, the
// /proc scan of `pause_programs` every 2 s, while another writer floods the
// same disk with fsynced writes). Starts its own daemon (crowdtrain-worker
// run) in a temporary folder.
//
//   bench_status_latency BIN_DIR [N]
#include "net/control/control_client.h"
#include "net/swarm/torrent_file.h"

#include <algorithm>
#include <arpa/inet.h>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <netinet/in.h>
#include <random>
#include <spawn.h>
#include <string>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>
#include <zmq.h>

extern char** environ;

namespace {

using namespace crowdtrain;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

pid_t spawn(const std::vector<std::string>& args, const std::string& output)
{
    std::vector<char*> argv;
    for (const std::string& a : args)
        argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    posix_spawn_file_actions_t files;
    posix_spawn_file_actions_init(&files);
    posix_spawn_file_actions_addopen(&files, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&files, 2, output.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    pid_t pid = -1;
    if (posix_spawn(&pid, argv[0], &files, nullptr, argv.data(), environ) != 0)
        pid = -1;
    posix_spawn_file_actions_destroy(&files);
    return pid;
}

struct Sample {
    std::vector<double> cliMs;
    std::vector<double> callMs;
    int failures = 0;
};

void measureOnce(Sample& s, const std::vector<std::string>& cli, control::ControlClient& client)
{
    auto start = Clock::now();
    const pid_t pid = spawn(cli, "/dev/null");
    int status = 0;
    waitpid(pid, &status, 0);
    s.cliMs.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        ++s.failures;
    start = Clock::now();
    if (!client.call("status", control::Value::map(), 10000))
        ++s.failures;
    s.callMs.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
}

void print(const char* what, Sample s)
{
    auto stats = [](std::vector<double>& v, double q) {
        std::sort(v.begin(), v.end());
        return v.empty() ? 0.0 : v[std::min(v.size() - 1, std::size_t(q * double(v.size())))];
    };
    std::printf("| %-44s | %5zu | %7.1f | %7.1f | %7.1f | %7.2f | %7.2f | %7.2f | %d |\n", what, s.cliMs.size(),
        stats(s.cliMs, 0.5), stats(s.cliMs, 0.99), stats(s.cliMs, 1.0), stats(s.callMs, 0.5), stats(s.callMs, 0.99),
        stats(s.callMs, 1.0), s.failures);
    std::fflush(stdout);
}

// A loopback port that accepts connections and never answers.
int silentListener(uint16_t& port)
{
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&address), length) != 0 || ::listen(fd, 64) != 0
        || ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0)
        return -1;
    port = ntohs(address.sin_port);
    return fd;
}

// A downloaded checkpoint the daemon seeds when the setting allows:
// <data>/checkpoints/bench/round-R/ with the file, its .torrent and .hub.
bool plantSeeded(const fs::path& data, int round, uint64_t bytes)
{
    const fs::path folder = data / "checkpoints" / "bench" / ("round-" + std::to_string(round));
    fs::create_directories(folder);
    std::mt19937_64 random{uint64_t(round)};
    std::string content(bytes, '\0');
    for (char& c : content)
        c = char(random());
    std::ofstream(folder / "model.safetensors", std::ios::binary) << content;
    auto torrent = swarm::makeTorrent(folder / "model.safetensors");
    if (!torrent)
        return false;
    std::ofstream(folder / ".model.safetensors.torrent", std::ios::binary) << torrent->bytes;
    std::ofstream(folder / ".hub") << "demo\n";
    return true;
}

// Rewrites `file` (64 MiB a time, fsynced) until `done`: a disk another
// program keeps busy.
void floodDisk(const fs::path& file, const std::atomic<bool>& done)
{
    const std::string block(1 << 20, 'f');
    while (!done) {
        const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0)
            return;
        for (int i = 0; i < 64 && !done; ++i)
            if (::write(fd, block.data(), block.size()) < 0)
                break;
        (void)::fsync(fd);
        ::close(fd);
    }
}

control::Value setting(const std::string& key, control::Value value)
{
    control::Value body = control::Value::map();
    body.set("key", key).set("value", std::move(value));
    return body;
}

} // namespace

int main(int argc, char** argv)
{
    if (argc < 2) {
        std::fprintf(stderr, "usage: bench_status_latency BIN_DIR [N]\n");
        return 2;
    }
    const fs::path bin = argv[1];
    const int n = argc > 2 ? std::atoi(argv[2]) : 200;
    char pattern[] = "/tmp/bench-status-XXXXXX";
    const fs::path root = ::mkdtemp(pattern);
    fs::create_directories(root / "run");
    const fs::path control = root / "run" / "crowdtrain";
    for (int round = 1; round <= 8; ++round)
        if (!plantSeeded(root / "data", round, 4 << 20)) {
            std::fprintf(stderr, "bench_status_latency: cannot plant a seeded checkpoint\n");
            return 1;
        }
    fs::create_directories(root / "config");
    std::ofstream(root / "config" / "settings.json") << R"({"settings": {"seeding": "never"}})";
    const std::string worker = (bin / "crowdtrain-worker").string();
    const pid_t daemon = spawn({worker, "run", "--data-dir", (root / "data").string(), "--config-dir",
                                   (root / "config").string(), "--control-dir", control.string()},
        (root / "daemon.log").string());
    std::unique_ptr<control::ControlClient> client;
    for (int i = 0; i < 600 && !(client && client->call("status", control::Value::map(), 1000)); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        if (!client)
            if (auto c = control::ControlClient::connect(control))
                client = std::move(*c);
    }
    if (!client) {
        std::fprintf(stderr, "bench_status_latency: the daemon did not start (%s)\n", (root / "daemon.log").c_str());
        return 1;
    }
    const std::vector<std::string> cli = {worker, "status", "--control-dir", control.string()};
    std::printf("| situation | N | CLI p50 ms | CLI p99 ms | CLI max ms | call p50 ms | call p99 ms | call max ms | "
                "failures |\n|---|---|---|---|---|---|---|---|---|\n");

    Sample idle;
    for (int i = 0; i < n; ++i)
        measureOnce(idle, cli, *client);
    print("idle", idle);

    // The swarm starting: seeding turned on, the next tick starts the
    // libtorrent session and adds the eight planted torrents.
    if (!client->call("settings_set", setting("seeding", "always"), 10000))
        ++idle.failures;
    Sample swarmStart;
    const auto swarmFrom = Clock::now();
    bool seeding = false;
    while (!seeding || Clock::now() - swarmFrom < std::chrono::seconds(3)) {
        measureOnce(swarmStart, cli, *client);
        if (!seeding)
            if (auto s = client->call("status", control::Value::map(), 10000)) {
                const control::Value torrents = (*s)["swarm"]["torrents"];
                seeding = torrents.size() == 8;
                for (std::size_t i = 0; seeding && i < torrents.size(); ++i)
                    seeding = torrents.at(i)["active"].toBool();
            }
        if (Clock::now() - swarmFrom > std::chrono::seconds(60))
            break;
    }
    print("swarm starting: seeding on, 8 torrents added", swarmStart);
    std::fprintf(stderr, "seeding all 8 after %.0f ms: %s\n",
        std::chrono::duration<double, std::milli>(Clock::now() - swarmFrom).count(), seeding ? "yes" : "no");

    // Six hubs that never answer, and a catalog refresh always in flight.
    std::vector<int> listeners;
    for (int i = 0; i < 6; ++i) {
        uint16_t port = 0;
        listeners.push_back(silentListener(port));
        char publicKey[41];
        char secretKey[41];
        zmq_curve_keypair(publicKey, secretKey);
        control::Value body = control::Value::map();
        body.set("link", "crowdtrain://127.0.0.1:" + std::to_string(port) + "/" + publicKey);
        if (!client->call("follow", body, 30000))
            ++idle.failures;
    }
    std::atomic<bool> done{false};
    std::atomic<int> refreshes{0};
    std::thread refresher([&] {
        auto own = control::ControlClient::connect(control);
        while (own && !done) {
            control::Value body = control::Value::map();
            body.set("refresh", true);
            if ((*own)->call("catalog", body, 60000))
                ++refreshes;
        }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    Sample silent;
    for (int i = 0; i < n; ++i)
        measureOnce(silent, cli, *client);
    done = true;
    refresher.join();
    print("6 silent hubs, catalog refresh in flight", silent);
    std::fprintf(stderr, "catalog refreshes completed meanwhile: %d\n", refreshes.load());
    for (int fd : listeners)
        ::close(fd);

    // A join of the demo: its coordinator starts (prepare + bind).
    std::atomic<bool> joined{false};
    double joinMs = 0;
    std::thread joiner([&] {
        auto own = control::ControlClient::connect(control);
        control::Value body = control::Value::map();
        body.set("hub", "demo").set("project", "demo-fortunes");
        const auto start = Clock::now();
        if (own)
            (void)(*own)->call("join", body, 180000);
        joinMs = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
        joined = true;
    });
    Sample starting;
    while (!joined && int(starting.cliMs.size()) < 10 * n)
        measureOnce(starting, cli, *client);
    joiner.join();
    print("join demo: its coordinator starting", starting);
    std::fprintf(stderr, "the join took %.0f ms\n", joinMs);

    // A slow disk: the demo trains (its traffic goes into data_usage.json,
    // fsynced), `pause_programs` makes the limits scan /proc every 2 s, and
    // another writer floods the same disk with fsynced writes.
    if (!client->call("settings_set", setting("pause_programs", "bench-no-such-program"), 10000))
        ++starting.failures;
    std::atomic<bool> flooded{false};
    std::thread flooder([&] { floodDisk(root / "flood.bin", flooded); });
    Sample slowDisk;
    for (int i = 0; i < n; ++i)
        measureOnce(slowDisk, cli, *client);
    flooded = true;
    flooder.join();
    print("slow disk: demo training, /proc scans, flood", slowDisk);
    if (auto s = client->call("status", control::Value::map(), 10000))
        std::fprintf(stderr, "state %s, month_bytes %llu\n", (*s)["state"].toString().c_str(),
            (unsigned long long)(*s)["limits"]["month_bytes"].toUInt());

    ::kill(daemon, SIGTERM);
    int status = 0;
    waitpid(daemon, &status, 0);
    std::error_code ec;
    fs::remove_all(root, ec);
    return 0;
}
