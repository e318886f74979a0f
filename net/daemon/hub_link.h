#pragma once

// A hub is one coordinator: its request endpoint and its public key, shared
// as one copy-pasteable link (docs/protocol.md, section 12.1):
//   crowdtrain://HOST:PORT/KEY
// HOST is a DNS name, an IPv4 address or an IPv6 address in brackets; PORT
// is the coordinator's request port; KEY is its Curve public key, written
// as 64 hexadecimal digits (URL-safe; formatHubLink writes this form) or as
// its 40 Z85 characters. Free functions, thread-safe.

#include "core/result.h"

#include <cstdint>
#include <string>
#include <string_view>

namespace crowdtrain::daemon {

struct HubLink {
    std::string host;
    uint16_t port = 0;
    std::string publicKey; // Z85, 40 characters

    std::string endpoint() const; // "tcp://HOST:PORT"
    bool operator==(const HubLink&) const = default;
};

// Error "bad_hub_link" naming what is wrong.
Result<HubLink> parseHubLink(std::string_view link);
std::string formatHubLink(const HubLink& hub);

} // namespace crowdtrain::daemon
