#pragma once

// A loopback TCP port nobody holds right now (for a c10d rendezvous in a
// test), so that two test runs on one machine do not collide.

#include <QtGlobal>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace crowdtrain::testing {

inline int freePort()
{
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&address), length) != 0
        || getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0)
        qFatal("cannot find a free loopback port");
    close(fd);
    return ntohs(address.sin_port);
}

} // namespace crowdtrain::testing
