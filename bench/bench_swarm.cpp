// How long until every volunteer has a checkpoint, and what the host's
// uplink sends: the BitTorrent swarm (net/swarm, as the coordinator and the
// daemons run it) against the coordinator alone (the same sessions, the
// volunteers unable to upload: every byte from the host, sent to every
// volunteer at once, as the chunked download from the coordinator is).
//
//   bench_swarm [--peers 16,64,256] [--file-mb 64] [--scale 8] [--host-mbit 100] [--modes swarm,host]
//               [--dir /dev/shm/bench-swarm]
//
// Real libtorrent sessions on loopback, one per volunteer, each held to a
// home profile of bench/homelink.sh (cable 50/10, DSL 16/2, fibre 300/100,
// far 50/20 Mbit/s down/up, in turn); the host's seed to --host-mbit up.
// Every rate and the file are divided by --scale, so times are those of a
// file --scale times larger at the real rates (a 64 MB file at scale 8
// stands for a 512 MB GPT-2 checkpoint). Loopback has no delay: round
// trips (10-150 ms on the test bed) are not in these times. Each
// volunteer is told the seed and up to 50 others, as `swarm_peers` does.

#include "net/swarm/swarm_session.h"
#include "net/swarm/torrent_file.h"
#include "net/transfer/sha256.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

using namespace crowdtrain;

namespace {

struct Profile {
    const char* name;
    double downMbit;
    double upMbit;
};
constexpr Profile kProfiles[] = {{"cable", 50, 10}, {"dsl", 16, 2}, {"fibre", 300, 100}, {"far", 50, 20}};

struct Options {
    std::vector<int> peers{16, 64};
    uint64_t fileMb = 64;
    double scale = 8;
    double hostMbit = 100;
    bool swarm = true; // run the swarm mode
    bool hostOnly = true; // and the host-only baseline
    std::filesystem::path dir = "/dev/shm/bench-swarm";
};

uint64_t bytesPerSecond(double mbit, double scale)
{
    return uint64_t(mbit * 125000.0 / scale);
}

struct Outcome {
    double allSeconds = 0;
    double medianSeconds = 0;
    uint64_t hostBytes = 0;
    bool complete = false;
    int verified = 0;
};

Outcome run(const Options& o, int peers, bool swarmOn, const swarm::TorrentFile& torrent,
    const std::filesystem::path& seedDir, const std::string& sha256)
{
    swarm::SwarmSettings seedSettings;
    seedSettings.listenAddress = "127.0.0.1";
    seedSettings.uploadBytesPerSecond = bytesPerSecond(o.hostMbit, o.scale);
    seedSettings.maxConnections = peers + 10;
    // The baseline is a server sending to everyone at once (libtorrent's 8
    // rotating unchoke slots would hold it under its uplink with slow peers).
    if (!swarmOn)
        seedSettings.unchokeSlots = -1;
    auto seed = swarm::SwarmSession::start(seedSettings);
    if (!seed) {
        std::fprintf(stderr, "bench_swarm: %s\n", seed.error().message.c_str());
        std::exit(1);
    }
    (void)(*seed)->seed(torrent, seedDir, swarmOn && peers >= 2);

    std::vector<std::unique_ptr<swarm::SwarmSession>> clients;
    std::vector<swarm::PeerEndpoint> endpoints;
    for (int i = 0; i < peers; ++i) {
        const Profile& p = kProfiles[i % 4];
        swarm::SwarmSettings s;
        s.listenAddress = "127.0.0.1";
        s.downloadBytesPerSecond = bytesPerSecond(p.downMbit, o.scale);
        // Without the swarm a volunteer knows only the seed: it is told of no
        // other, and peer exchange is off.
        s.uploadBytesPerSecond = bytesPerSecond(p.upMbit, o.scale);
        s.peerExchange = swarmOn;
        s.maxConnections = 60;
        auto client = swarm::SwarmSession::start(s);
        if (!client) {
            std::fprintf(stderr, "bench_swarm: %s\n", client.error().message.c_str());
            std::exit(1);
        }
        endpoints.push_back({"127.0.0.1", (*client)->listenPort()});
        clients.push_back(std::move(*client));
    }
    const auto started = std::chrono::steady_clock::now();
    std::mt19937 random(1234);
    for (int i = 0; i < peers; ++i) {
        const auto dir = o.dir / ("peer-" + std::to_string(i));
        std::filesystem::create_directories(dir);
        (void)clients[std::size_t(i)]->download(torrent, dir);
        std::vector<swarm::PeerEndpoint> told{{"127.0.0.1", (*seed)->listenPort()}};
        if (swarmOn) {
            std::vector<swarm::PeerEndpoint> others;
            for (int j = 0; j < peers; ++j)
                if (j != i)
                    others.push_back(endpoints[std::size_t(j)]);
            std::shuffle(others.begin(), others.end(), random);
            others.resize(std::min<std::size_t>(others.size(), 49));
            told.insert(told.end(), others.begin(), others.end());
        }
        clients[std::size_t(i)]->addPeers(torrent.infoHash, told);
    }
    std::vector<double> done(std::size_t(peers), -1);
    const double limitSeconds = 3600;
    while (true) {
        const double now = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
        int finished = 0;
        for (int i = 0; i < peers; ++i) {
            if (done[std::size_t(i)] < 0) {
                auto p = clients[std::size_t(i)]->progress(torrent.infoHash);
                if (p && p->complete)
                    done[std::size_t(i)] = now;
            }
            finished += done[std::size_t(i)] >= 0;
        }
        if (finished == peers || now > limitSeconds)
            break;
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
    Outcome outcome;
    outcome.hostBytes = (*seed)->totalUploaded();
    std::vector<double> sorted = done;
    std::sort(sorted.begin(), sorted.end());
    outcome.complete = sorted.front() >= 0;
    outcome.allSeconds = sorted.back();
    outcome.medianSeconds = sorted[sorted.size() / 2];
    clients.clear();
    seed->reset();
    for (int i = 0; i < peers; ++i) {
        const auto file = o.dir / ("peer-" + std::to_string(i)) / torrent.fileName;
        auto hash = net::sha256OfFile(file);
        outcome.verified += hash && *hash == sha256;
        std::filesystem::remove_all(o.dir / ("peer-" + std::to_string(i)));
    }
    return outcome;
}

} // namespace

int main(int argc, char** argv)
{
    Options o;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string flag = argv[i], value = argv[i + 1];
        if (flag == "--peers") {
            o.peers.clear();
            for (std::size_t at = 0; at < value.size();) {
                const std::size_t comma = value.find(',', at);
                o.peers.push_back(std::stoi(value.substr(at, comma - at)));
                at = comma == std::string::npos ? value.size() : comma + 1;
            }
        } else if (flag == "--file-mb") {
            o.fileMb = std::stoull(value);
        } else if (flag == "--scale") {
            o.scale = std::stod(value);
        } else if (flag == "--host-mbit") {
            o.hostMbit = std::stod(value);
        } else if (flag == "--modes") {
            o.swarm = value.find("swarm") != std::string::npos;
            o.hostOnly = value.find("host") != std::string::npos;
        } else if (flag == "--dir") {
            o.dir = value;
        } else {
            std::fprintf(stderr, "bench_swarm: unknown option %s\n", flag.c_str());
            return 2;
        }
    }
    std::filesystem::remove_all(o.dir);
    const auto seedDir = o.dir / "seed";
    std::filesystem::create_directories(seedDir);
    const auto file = seedDir / "model.safetensors";
    {
        std::mt19937_64 random(42);
        std::string data(o.fileMb << 20, '\0');
        for (std::size_t i = 0; i + 8 <= data.size(); i += 8) {
            const uint64_t word = random();
            std::memcpy(data.data() + i, &word, 8);
        }
        std::ofstream(file, std::ios::binary).write(data.data(), std::streamsize(data.size()));
    }
    auto torrent = swarm::makeTorrent(file);
    const std::string sha256 = *net::sha256OfFile(file);
    if (!torrent) {
        std::fprintf(stderr, "bench_swarm: %s\n", torrent.error().message.c_str());
        return 1;
    }
    const double fileBytes = double(o.fileMb << 20);
    std::printf(
        "file %llu MB at scale %.0f (stands for %.0f MB), host uplink %.0f Mbit/s, profiles cable/dsl/fibre/far\n",
        (unsigned long long)o.fileMb, o.scale, double(o.fileMb) * o.scale, o.hostMbit);
    std::fflush(stdout);
    std::printf("| volunteers | mode | all have it (s) | median (s) | host sent (copies) | host sent (MB, real scale) "
                "| verified |\n");
    std::printf("| ---: | --- | ---: | ---: | ---: | ---: | ---: |\n");
    for (int peers : o.peers)
        for (bool swarmOn : {true, false}) {
            if (swarmOn ? !o.swarm : !o.hostOnly)
                continue;
            const Outcome r = run(o, peers, swarmOn, *torrent, seedDir, sha256);
            std::printf("| %d | %s | %s%.0f | %.0f | %.2f | %.0f | %d/%d |\n", peers, swarmOn ? "swarm" : "host only",
                r.complete ? "" : ">", r.allSeconds, r.medianSeconds, double(r.hostBytes) / fileBytes,
                double(r.hostBytes) * o.scale / 1e6, r.verified, peers);
            std::fflush(stdout);
        }
    std::filesystem::remove_all(o.dir);
    return 0;
}
