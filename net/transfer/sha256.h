#pragma once

// SHA-256 (libsodium crypto_hash_sha256) as 64 lowercase hex digits, the form
// every hash takes on the wire. Sha256 hashes a stream piece by piece; one
// object per thread.

#include "core/result.h"

#include <array>
#include <cstdint>
#include <filesystem>
#include <sodium.h>
#include <string>
#include <string_view>

namespace crowdtrain::net {

using Sha256Digest = std::array<uint8_t, crypto_hash_sha256_BYTES>;

std::string sha256Hex(std::string_view bytes);
Sha256Digest sha256Digest(std::string_view bytes);
std::string toHex(const Sha256Digest& digest);

class Sha256 {
public:
    Sha256();
    void update(std::string_view bytes);
    void update(const void* data, std::size_t size);
    // The digest; the object starts over afterwards.
    std::string finishHex();
    Sha256Digest finish(); // the raw 32 bytes (file formats store these)

private:
    crypto_hash_sha256_state m_state;
};

// How an anonymous volunteer is told apart where people read it (the app's
// leaderboard, the worker's log): the first 4 hex digits of the SHA-256 of
// its Z85 public key, upper case. Never the key itself, which means nothing
// to a person.
std::string anonymousTag(std::string_view publicKey);

// Hashes a file (or its first `maxBytes`), reading it in pieces.
Result<std::string> sha256OfFile(const std::filesystem::path& file);

} // namespace crowdtrain::net
