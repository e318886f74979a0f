#include "net/coordinator/sha256.h"

#include <sodium.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <vector>

namespace crowdtrain::coordinator {

struct Sha256::State {
    crypto_hash_sha256_state state;
};

Sha256::Sha256()
    : m_state(std::make_unique<State>())
{
    // Idempotent and thread-safe; picks the fastest implementation for this
    // CPU. SHA-256 works without it, so a failure (no entropy source) is moot.
    [[maybe_unused]] const int initialised = sodium_init();
    crypto_hash_sha256_init(&m_state->state);
}

Sha256::~Sha256() = default;

void Sha256::update(const void* data, std::size_t size)
{
    crypto_hash_sha256_update(&m_state->state, static_cast<const unsigned char*>(data), size);
}

Sha256Digest Sha256::finish()
{
    Sha256Digest digest{};
    crypto_hash_sha256_final(&m_state->state, digest.data());
    return digest;
}

Sha256Digest sha256(std::string_view bytes)
{
    Sha256 hash;
    hash.update(bytes);
    return hash.finish();
}

std::string toHex(const Sha256Digest& digest)
{
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string hex;
    hex.reserve(64);
    for (uint8_t byte : digest) {
        hex.push_back(kDigits[byte >> 4]);
        hex.push_back(kDigits[byte & 0xF]);
    }
    return hex;
}

Result<std::string> sha256FileHex(const std::filesystem::path& file)
{
    std::ifstream in(file, std::ios::binary);
    if (!in)
        return Error::make("io_error", "cannot open " + file.string() + ": " + std::strerror(errno));
    Sha256 hash;
    std::vector<char> buffer(1 << 20);
    while (in) {
        in.read(buffer.data(), std::streamsize(buffer.size()));
        hash.update(buffer.data(), std::size_t(in.gcount()));
    }
    if (in.bad())
        return Error::make("io_error", "cannot read " + file.string());
    return toHex(hash.finish());
}

} // namespace crowdtrain::coordinator
