#include "net/daemon/hub_link.h"

#include "core/hex.h"
#include "net/control/control_names.h"

#include <zmq.h>

#include <cctype>

namespace crowdtrain::daemon {

namespace {

constexpr std::string_view kScheme = "crowdtrain://";

Error bad(std::string_view link, const std::string& what)
{
    return Error::make(control::errc::kBadHubLink,
        "\"" + std::string(link.substr(0, 200)) + "\" is not a hub link: " + what
            + " (a hub link is crowdtrain://HOST:PORT/KEY)");
}

bool isHostChar(char c)
{
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_';
}

} // namespace

std::string HubLink::endpoint() const
{
    return "tcp://" + host + ":" + std::to_string(port);
}

Result<HubLink> parseHubLink(std::string_view link)
{
    std::string_view rest = link;
    while (!rest.empty() && std::isspace(static_cast<unsigned char>(rest.front())))
        rest.remove_prefix(1);
    while (!rest.empty() && std::isspace(static_cast<unsigned char>(rest.back())))
        rest.remove_suffix(1);
    if (!rest.starts_with(kScheme))
        return bad(link, "it must start with crowdtrain://");
    rest.remove_prefix(kScheme.size());
    HubLink hub;
    std::size_t hostEnd = 0;
    if (rest.starts_with('[')) {
        hostEnd = rest.find(']');
        if (hostEnd == std::string_view::npos || hostEnd < 3)
            return bad(link, "an IPv6 address needs its closing ]");
        for (char c : rest.substr(1, hostEnd - 1))
            if (!std::isxdigit(static_cast<unsigned char>(c)) && c != ':' && c != '.')
                return bad(link, "the IPv6 address has a character that is not hexadecimal, ':' or '.'");
        hub.host = std::string(rest.substr(0, hostEnd + 1));
        ++hostEnd;
    } else {
        while (hostEnd < rest.size() && isHostChar(rest[hostEnd]))
            ++hostEnd;
        if (hostEnd == 0 || hostEnd > 253)
            return bad(link, "the host name is missing or too long");
        hub.host = std::string(rest.substr(0, hostEnd));
    }
    rest.remove_prefix(hostEnd);
    if (!rest.starts_with(':'))
        return bad(link, "the host must be followed by :PORT");
    rest.remove_prefix(1);
    std::size_t digits = 0;
    uint32_t port = 0;
    while (digits < rest.size() && std::isdigit(static_cast<unsigned char>(rest[digits])) && digits < 6)
        port = port * 10 + uint32_t(rest[digits++] - '0');
    if (digits == 0 || port == 0 || port > 65535)
        return bad(link, "the port must be a number from 1 to 65535");
    hub.port = uint16_t(port);
    rest.remove_prefix(digits);
    if (!rest.starts_with('/'))
        return bad(link, "the port must be followed by /KEY");
    rest.remove_prefix(1);
    if (rest.size() == 64) {
        uint8_t key[32];
        for (std::size_t i = 0; i < 32; ++i) {
            auto nibble = [](char c) -> int {
                if (c >= '0' && c <= '9')
                    return c - '0';
                if (c >= 'a' && c <= 'f')
                    return c - 'a' + 10;
                if (c >= 'A' && c <= 'F')
                    return c - 'A' + 10;
                return -1;
            };
            const int high = nibble(rest[2 * i]);
            const int low = nibble(rest[2 * i + 1]);
            if (high < 0 || low < 0)
                return bad(link, "a 64-character key must be hexadecimal");
            key[i] = uint8_t(high * 16 + low);
        }
        char z85[41];
        zmq_z85_encode(z85, key, 32);
        hub.publicKey = z85;
    } else if (rest.size() == 40) {
        uint8_t key[32];
        const std::string text(rest);
        if (!zmq_z85_decode(key, text.c_str()))
            return bad(link, "a 40-character key must be Z85");
        hub.publicKey = text;
    } else {
        return bad(link,
            "the key must be 64 hexadecimal digits or 40 Z85 characters, got " + std::to_string(rest.size())
                + " characters");
    }
    return hub;
}

std::string formatHubLink(const HubLink& hub)
{
    uint8_t key[32];
    const std::string hex = zmq_z85_decode(key, hub.publicKey.c_str()) ? core::hexOf(key, sizeof key) : hub.publicKey;
    return std::string(kScheme) + hub.host + ":" + std::to_string(hub.port) + "/" + hex;
}

} // namespace crowdtrain::daemon
