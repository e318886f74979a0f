#include "net/page/hub_address.h"

#include "core/hex.h"

#include "net/transport/client.h"
#include "net/wire/error_codes.h"

#include <cctype>
#include <charconv>
#include <unistd.h>
#include <zmq.h>

namespace crowdtrain::page {
namespace {

bool boundToAll(std::string_view host)
{
    return host.empty() || host == "*" || host == "0.0.0.0" || host == "::" || host == "[::]";
}

std::string bracketed(std::string_view host)
{
    if (host.find(':') != std::string_view::npos && !host.starts_with('['))
        return "[" + std::string(host) + "]";
    return std::string(host);
}

} // namespace

Result<HttpAddress> parseHttpAddress(std::string_view text)
{
    const auto bad = [&](const std::string& why) {
        return Error::make(net::errc::kBadOptions, "--http " + std::string(text) + ": " + why);
    };
    const std::size_t colon = text.rfind(':');
    if (colon == std::string_view::npos || colon == 0)
        return bad("give ADDRESS:PORT, e.g. 127.0.0.1:8080");
    std::string_view host = text.substr(0, colon);
    if (host.starts_with('[')) {
        if (!host.ends_with(']') || host.size() < 3)
            return bad("an IPv6 address goes in brackets, e.g. [::1]:8080");
        host = host.substr(1, host.size() - 2);
    }
    for (char c : host)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == ':' || c == '_'))
            return bad("the address holds a character that is not in a host name or IP address");
    const std::string_view portText = text.substr(colon + 1);
    unsigned port = 0;
    const auto [end, ec] = std::from_chars(portText.data(), portText.data() + portText.size(), port);
    if (portText.empty() || ec != std::errc() || end != portText.data() + portText.size() || port > 65535)
        return bad("the port must be a number from 0 (any free port) to 65535");
    return HttpAddress{std::string(host), uint16_t(port)};
}

std::string reachableHost(std::string_view boundHost, std::string_view publicHost)
{
    if (!publicHost.empty())
        return std::string(publicHost);
    if (!boundToAll(boundHost))
        return std::string(boundHost);
    char name[256] = {};
    if (::gethostname(name, sizeof name - 1) == 0 && name[0])
        return name;
    return "localhost";
}

std::string hubLink(std::string_view requestEndpoint, std::string_view publicKeyZ85, std::string_view publicHost)
{
    const std::optional<std::string> host = net::endpointHost(requestEndpoint);
    if (!host || publicKeyZ85.size() != 40)
        return {};
    const std::string port(requestEndpoint.substr(requestEndpoint.rfind(':') + 1));
    uint8_t key[32];
    const std::string z85(publicKeyZ85);
    if (!zmq_z85_decode(key, z85.c_str()))
        return {};
    return "crowdtrain://" + bracketed(reachableHost(*host, publicHost)) + ":" + port + "/"
        + core::hexOf(key, sizeof key);
}

std::string pageUrl(std::string_view host, uint16_t port)
{
    return "http://" + bracketed(host) + ":" + std::to_string(port) + "/";
}

} // namespace crowdtrain::page
