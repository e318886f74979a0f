// crowdtrain-server: a project coordinator (docs/architecture.md, "Processes").
#include "app/args.h"
#include "core/xdg.h"
#include "engine/cpu_runtime.h"
#include "net/coordinator/coordinator_server.h"
#include "net/page/page_server.h"
#include "net/swarm/swarm_session.h"
#include "net/transport/client.h"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>

namespace {

crowdtrain::coordinator::CoordinatorServer* g_server = nullptr;

void onSignal(int)
{
    if (g_server)
        g_server->stop();
}

std::filesystem::path defaultStateDir()
{
    auto dir = crowdtrain::core::xdgDataFolder("crowdtrain-server");
    return dir ? *dir : std::filesystem::path("crowdtrain-server-state");
}

// The swarm listens where the requests do: "tcp://127.0.0.1:*" gives
// 127.0.0.1, "tcp://*:5555" every address.
std::string swarmAddressOf(const std::string& bindEndpoint)
{
    const std::optional<std::string> host = crowdtrain::net::endpointHost(bindEndpoint);
    return host && crowdtrain::swarm::isIpAddress(*host) ? *host : "0.0.0.0";
}

// One line on stderr per closed round, for the host.
void logRound(const crowdtrain::coordinator::RoundReport& r)
{
    char valLoss[32] = "-";
    if (r.valLoss)
        std::snprintf(valLoss, sizeof valLoss, "%.4f", *r.valLoss);
    std::fprintf(stderr,
        "%s: round %lld closed: %lld tokens (%lld in all), %lld volunteers, val loss %s, close %lld ms (version "
        "served after %lld ms), %llu bytes written%s\n",
        r.project.c_str(), static_cast<long long>(r.round), static_cast<long long>(r.tokens),
        static_cast<long long>(r.totalTokens), static_cast<long long>(r.volunteers), valLoss,
        static_cast<long long>(r.closeMs), static_cast<long long>(r.publishedMs),
        static_cast<unsigned long long>(r.bytesWritten), r.checkpoint ? " (with its checkpoint)" : "");
    std::fflush(stderr);
}

// Tests only: CROWDTRAIN_TEST_CRASH_AT=<point> kills the server (SIGKILL)
// when a round close reaches that point (RuntimeOptions::faultPoint), so
// that the restart tests can crash it anywhere in a close.
void crashAtTestPoint(std::string_view where, int64_t round)
{
    static const char* point = std::getenv("CROWDTRAIN_TEST_CRASH_AT");
    if (point && where == point) {
        std::fprintf(stderr, "crowdtrain-server: crashing at %s of round %lld (CROWDTRAIN_TEST_CRASH_AT)\n", point,
            static_cast<long long>(round));
        std::fflush(stderr);
        std::raise(SIGKILL);
    }
}

int serve(int argc, char** argv)
{
    using namespace crowdtrain;
    engine::prepareCpuRuntime(argv);
    app::Args args("crowdtrain-server", "the Crowdtrain project coordinator",
        "  crowdtrain-server PROJECT_SPEC...   coordinate the projects described by the spec files\n"
        "First prints one JSON line: the server's public key, the bound endpoints, the hub link\n"
        "volunteers paste (crowdtrain://HOST:PORT/KEY) and, with --http, the public page's address;\n"
        "then the same in words on stderr, and serves until SIGINT or SIGTERM.");
    const coordinator::ServerOptions defaults;
    args.option("bind", "ZeroMQ endpoint for requests (ROUTER); port * picks a free one", defaults.bindEndpoint);
    args.option("publish", "ZeroMQ endpoint for live events (PUB)", defaults.publishEndpoint);
    args.option("state", "state folder (one sub-folder per project); default $XDG_DATA_HOME/crowdtrain-server");
    args.option("keys", "the server's Curve key pair file, created when missing; default STATE/server.key");
    args.integerOption("heartbeat-ms", "heartbeat interval announced to volunteers",
        std::to_string(defaults.runtime.heartbeatIntervalMs));
    args.integerOption("liveness", "missed heartbeat intervals before a volunteer counts as gone",
        std::to_string(defaults.runtime.heartbeatLiveness));
    args.integerOption("threads", "CPU threads for evaluation (0 = all cores)", "0");
    args.option("http",
        "serve the public, read-only project page on ADDRESS:PORT (e.g. 127.0.0.1:8080; "
        "0.0.0.0:8080 opens it to the network; port 0 picks a free one); off by default");
    args.option("swarm",
        "seed published checkpoints over BitTorrent on ADDRESS:PORT (volunteers then download them from "
        "each other, and this host sends about one copy); \"off\" serves them in chunks only; "
        "default: the --bind address, a free port");
    args.integerOption("swarm-upload-limit", "bytes per second the swarm may send (0: no limit)", "0");
    args.option("public-host",
        "the host name volunteers and viewers reach this server by, in the hub link and "
        "the page's address; default: the bound address, or this machine's name");
    if (auto exitCode = args.parse(app::argumentsOf(argc, argv)))
        return *exitCode;
    if (args.positionals().empty()) {
        std::cerr << "crowdtrain-server: give at least one project spec file (see --help)\n";
        return 2;
    }
    engine::configureCpuThreads(int(args.integer("threads")));

    coordinator::ServerOptions options;
    options.bindEndpoint = args.value("bind");
    options.publishEndpoint = args.value("publish");
    options.stateDir = args.has("state") ? std::filesystem::path(args.value("state")) : defaultStateDir();
    options.runtime.heartbeatIntervalMs = uint64_t(std::max(100LL, args.integer("heartbeat-ms")));
    options.runtime.heartbeatLiveness = uint64_t(std::max(1LL, args.integer("liveness")));
    options.runtime.roundReport = logRound;
    if (std::getenv("CROWDTRAIN_TEST_CRASH_AT"))
        options.runtime.faultPoint = crashAtTestPoint;
    std::error_code ec;
    std::filesystem::create_directories(options.stateDir, ec);
    const auto keyFile = args.has("keys") ? std::filesystem::path(args.value("keys")) : options.stateDir / "server.key";
    auto keys = net::loadOrCreateKeyPair(keyFile);
    if (!keys) {
        std::cerr << "crowdtrain-server: " << keys.error().message << "\n";
        return 1;
    }
    options.keys = *keys;

    std::vector<coordinator::ProjectSpec> specs;
    for (const std::string& file : args.positionals()) {
        auto spec = coordinator::loadProjectSpec(file);
        if (!spec) {
            std::cerr << "crowdtrain-server: " << spec.error().message << "\n";
            return 1;
        }
        specs.push_back(std::move(*spec));
    }
    std::optional<page::HttpAddress> httpAddress;
    if (args.has("http")) {
        auto address = page::parseHttpAddress(args.value("http"));
        if (!address) {
            std::cerr << "crowdtrain-server: " << address.error().message << "\n";
            return 2;
        }
        httpAddress = *address;
    }
    if (!args.has("swarm") || args.value("swarm") != "off") {
        swarm::SwarmSettings swarmSettings;
        if (args.has("swarm")) {
            auto address = page::parseHttpAddress(args.value("swarm"));
            if (!address) {
                std::cerr << "crowdtrain-server: --swarm: " << address.error().message << "\n";
                return 2;
            }
            swarmSettings.listenAddress = address->host;
            swarmSettings.listenPort = address->port;
        } else {
            swarmSettings.listenAddress = swarmAddressOf(options.bindEndpoint);
        }
        swarmSettings.uploadBytesPerSecond = uint64_t(std::max(0LL, args.integer("swarm-upload-limit")));
        options.swarm = swarmSettings;
    }
    const std::string publicHost = args.has("public-host") ? args.value("public-host") : std::string();
    const std::filesystem::path stateDir = options.stateDir;
    std::vector<std::string> projectNames, unprotected;
    for (const coordinator::ProjectSpec& spec : specs) {
        projectNames.push_back(spec.name);
        if (const std::string why = spec.unprotected(); !why.empty())
            unprotected.push_back(spec.name + ": unprotected against Sybils: " + why);
    }
    auto server = coordinator::CoordinatorServer::start(std::move(options), std::move(specs));
    if (!server) {
        std::cerr << "crowdtrain-server: " << server.error().message << "\n";
        return 1;
    }
    const std::string hubLink = page::hubLink((*server)->requestEndpoint(), (*server)->keys().publicKey, publicHost);
    // The page reads snapshots the loop publishes; it never touches a project.
    std::unique_ptr<page::PageServer> pageServer;
    std::string pageUrl;
    if (httpAddress) {
        auto feed = std::make_shared<page::PageFeed>(stateDir);
        (*server)->setTickObserver(
            [feed](coordinator::ProjectRuntime& project, int64_t nowMs) { feed->refresh(project, nowMs); });
        page::PageOptions pageOptions;
        pageOptions.address = *httpAddress;
        pageOptions.hubLink = hubLink;
        auto started = page::PageServer::start(std::move(pageOptions), feed);
        if (!started) {
            std::cerr << "crowdtrain-server: " << started.error().message << "\n";
            return 1;
        }
        pageServer = std::move(*started);
        pageUrl = page::pageUrl(page::reachableHost(httpAddress->host, publicHost), pageServer->port());
    }
    g_server = server->get();
    std::signal(SIGINT, onSignal);
    std::signal(SIGTERM, onSignal);
    // One line a script can parse, then the same for the host to read.
    std::printf("{\"public_key\":\"%s\",\"requests\":\"%s\",\"events\":\"%s\",\"hub_link\":\"%s\",\"page\":\"%s\","
                "\"swarm_port\":%u}\n",
        (*server)->keys().publicKey.c_str(), (*server)->requestEndpoint().c_str(), (*server)->publishEndpoint().c_str(),
        hubLink.c_str(), pageUrl.c_str(), unsigned((*server)->swarmPort()));
    std::fflush(stdout);
    std::cerr << "Hub link (volunteers paste it in Crowdtrain): " << hubLink << "\n";
    if (!pageUrl.empty())
        for (const std::string& name : projectNames)
            std::cerr << "Project page: " << pageUrl << "projects/" << name << "\n";
    for (const std::string& line : unprotected)
        std::cerr << line << "\n";
    std::cerr << std::flush;
    const Status served = (*server)->run();
    g_server = nullptr;
    if (!served) {
        std::cerr << "crowdtrain-server: " << served.error().message << "\n";
        return 1;
    }
    std::cerr << "crowdtrain-server: sent " << (*server)->swarmBytesSent() << " bytes to the swarm, "
              << (*server)->checkpointChunkBytesSent() << " of checkpoints and " << (*server)->stateChunkBytesSent()
              << " of states in fetch replies\n";
    if (const uint64_t dropped = (*server)->droppedReplies())
        std::cerr << "crowdtrain-server: " << dropped
                  << " repl(ies) dropped, not sent: the client's queue was full or it had gone\n";
    if (const uint64_t failed = (*server)->failedTicks())
        std::cerr << "crowdtrain-server: " << failed << " tick(s) failed and were retried (see above)\n";
    return 0;
}

} // namespace

// Whatever escapes is said and the process ends with status 1, never with
// an unexplained abort (a damaged file is set aside where it is read).
int main(int argc, char** argv)
{
    try {
        return serve(argc, argv);
    } catch (const std::exception& e) {
        std::cerr << "crowdtrain-server: internal error: " << e.what() << "\n";
    } catch (...) {
        std::cerr << "crowdtrain-server: internal error\n";
    }
    return 1;
}
