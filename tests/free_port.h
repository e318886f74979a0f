#pragma once

// A loopback TCP port nobody holds right now (for a c10d rendezvous or a
// server in a test), so that two test runs on one machine do not collide.
//
// It is drawn from below the kernel's ephemeral range: a port from inside
// it, once released, can be handed to any outgoing connection in the
// meantime, and a client that retries connect() to a port nobody listens
// on yet can even connect to itself (TCP simultaneous open), holding the
// port its server is about to bind.

#include <QtGlobal>

#include <algorithm>
#include <arpa/inet.h>
#include <fstream>
#include <netinet/in.h>
#include <random>
#include <sys/socket.h>
#include <unistd.h>

namespace crowdtrain::testing {

inline int freePort()
{
    int ephemeralLow = 32768, ephemeralHigh = 60999;
    std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> ephemeralLow >> ephemeralHigh;
    const int low = 10000, high = std::max(low + 1000, ephemeralLow) - 1;
    std::random_device seed;
    std::mt19937 draw(seed());
    std::uniform_int_distribution<int> pick(low, high);
    for (int attempt = 0; attempt < 200; ++attempt) {
        const int port = pick(draw);
        const int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0)
            break;
        sockaddr_in address{};
        address.sin_family = AF_INET;
        address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        address.sin_port = htons(uint16_t(port));
        const bool bound = bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
        close(fd);
        if (bound)
            return port;
    }
    qFatal("cannot find a free loopback port");
    return 0;
}

} // namespace crowdtrain::testing
