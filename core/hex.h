#pragma once

// Bytes as lowercase hex digits, the form hashes and keys take in text
// (SHA-256 on the wire, BitTorrent info-hashes, hub links). Header-only.

#include <cstddef>
#include <string>
#include <string_view>

namespace crowdtrain::core {

inline std::string hexOf(const void* data, std::size_t size)
{
    static constexpr char kDigits[] = "0123456789abcdef";
    const auto* bytes = static_cast<const unsigned char*>(data);
    std::string hex(2 * size, '0');
    for (std::size_t i = 0; i < size; ++i) {
        hex[2 * i] = kDigits[bytes[i] >> 4];
        hex[2 * i + 1] = kDigits[bytes[i] & 0xF];
    }
    return hex;
}

inline std::string hexOf(std::string_view bytes)
{
    return hexOf(bytes.data(), bytes.size());
}

} // namespace crowdtrain::core
