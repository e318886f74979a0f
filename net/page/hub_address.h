#pragma once

// The two addresses a host shares: the hub link volunteers paste
// (crowdtrain://HOST:PORT/KEY, docs/protocol.md section 12.1, the key in its
// URL-safe hexadecimal form) and the public page's http:// address; and the
// parsing of crowdtrain-server's --http ADDRESS:PORT. Free functions,
// thread-safe.

#include "core/result.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace crowdtrain::page {

struct HttpAddress {
    std::string host; // "127.0.0.1", "0.0.0.0", "::1" (no brackets)
    uint16_t port = 0; // 0: any free port
};

// "HOST:PORT" or "[IPV6]:PORT"; error "bad_options" naming what is wrong.
Result<HttpAddress> parseHttpAddress(std::string_view text);

// The host part volunteers and viewers use: `publicHost` when given, else
// the bound host, or this machine's name when bound to every interface.
std::string reachableHost(std::string_view boundHost, std::string_view publicHost);

// crowdtrain://HOST:PORT/KEY from a ZeroMQ endpoint ("tcp://127.0.0.1:7400")
// and a Z85 public key; empty when the endpoint or key is not one.
std::string hubLink(std::string_view requestEndpoint, std::string_view publicKeyZ85, std::string_view publicHost);

// http://HOST:PORT/ (IPv6 hosts in brackets).
std::string pageUrl(std::string_view host, uint16_t port);

} // namespace crowdtrain::page
