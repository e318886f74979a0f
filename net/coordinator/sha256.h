#pragma once

// SHA-256 (libsodium's crypto_hash_sha256) for state files, published
// updates and checkpoint files. Sha256 is one running hash, used by one
// thread; the free functions are thread-safe.

#include "engine/result.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

namespace crowdtrain::coordinator {

using Sha256Digest = std::array<uint8_t, 32>;

class Sha256 {
public:
    Sha256();
    ~Sha256();
    Sha256(const Sha256&) = delete;
    Sha256& operator=(const Sha256&) = delete;

    void update(const void* data, std::size_t size);
    void update(std::string_view bytes) { update(bytes.data(), bytes.size()); }
    Sha256Digest finish();

private:
    struct State;
    std::unique_ptr<State> m_state;
};

Sha256Digest sha256(std::string_view bytes);
std::string toHex(const Sha256Digest& digest);
// The SHA-256 of a file's bytes, in lowercase hex, read in pieces.
Result<std::string> sha256FileHex(const std::filesystem::path& file);

} // namespace crowdtrain::coordinator
