// crowdtrain-core: the training core (docs/architecture.md, "Processes"), one
// per device family (this build's libtorch decides which: CPU from Debian's,
// CUDA from PyTorch's). The daemon starts it and speaks docs/protocol.md §13
// to it over descriptor 3; it is the only volunteer program that loads
// libtorch, so a fault in a GPU kernel ends this process, never the daemon.
//   crowdtrain-core serve --channel-fd 3   what the daemon runs
//   crowdtrain-core probe                  prints its hello as JSON (family, devices)
#include "app/args.h"
#include "engine/cpu_runtime.h"
#include "net/core_link/core_messages.h"
#include "net/core_service/core_service.h"

#include <chrono>
#include <cstdlib>
#include <fcntl.h>
#include <iostream>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

using namespace crowdtrain;

namespace {

// The hello a daemon would get, through a socket pair of our own.
int probe()
{
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0)
        return 1;
    corelink::CoreChannel daemonEnd(pair[0]), coreEnd(pair[1]);
    net::MapWriter hello = corelink::message(corelink::type::kHello);
    hello.u64("protocol", corelink::kCoreProtocol);
    (void)daemonEnd.send(hello);
    (void)daemonEnd.send(corelink::message(corelink::type::kExit));
    coreservice::serve(coreEnd);
    auto reply = daemonEnd.receive(1000);
    if (!reply)
        return 1;
    auto decoded = corelink::CoreHello::decode(*reply);
    if (!decoded)
        return 1;
    std::cout << "{\"family\":\"" << decoded->family << "\",\"runtime\":\"" << decoded->runtime << "\",\"devices\":[";
    for (std::size_t i = 0; i < decoded->devices.size(); ++i)
        std::cout << (i ? "," : "") << '"' << decoded->devices[i] << '"';
    std::cout << "],\"note\":\"" << decoded->note << "\"}\n";
    return 0;
}

} // namespace

int main(int argc, char** argv)
{
    engine::prepareCpuRuntime(argv);
    app::Args args("crowdtrain-core", "the Crowdtrain training core (started by crowdtrain-daemon)",
        "  crowdtrain-core serve --channel-fd N | probe");
    args.integerOption("channel-fd", "the descriptor of the daemon's socket", "3");
    if (auto exitCode = args.parse(app::argumentsOf(argc, argv)))
        return *exitCode;
    const auto& positionals = args.positionals();
    const std::string command = positionals.empty() ? "" : positionals[0];
    engine::configureCpuThreads(0);
    if (command == "probe")
        return probe();
    if (command != "serve") {
        std::cerr << "crowdtrain-core: the command is serve or probe (see --help)\n";
        return 2;
    }
    const int fd = int(args.integer("channel-fd"));
    if (fd < 0 || ::fcntl(fd, F_GETFD) < 0) {
        std::cerr << "crowdtrain-core: descriptor " << fd
                  << " is not open: started by hand? (crowdtrain-daemon starts it)\n";
        return 2;
    }
    // No core outlives its daemon: once this process is re-parented (the
    // daemon died, even by SIGKILL), it exits, mid-step if need be.
    const pid_t daemon = ::getppid();
    std::thread([daemon] {
        while (::getppid() == daemon)
            std::this_thread::sleep_for(std::chrono::milliseconds(500));
        std::_Exit(0);
    }).detach();
    corelink::CoreChannel channel(fd);
    const auto fault
        = coreservice::Fault::parse(std::getenv("CROWDTRAIN_CORE_FAULT"), std::getenv("CROWDTRAIN_CORE_FAULT_ONCE"));
    return coreservice::serve(channel, fault);
}
