#include "net/transfer/sha256.h"

#include <fstream>
#include <vector>

namespace crowdtrain::net {

namespace {

std::string toHex(const unsigned char* digest, std::size_t size)
{
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string hex(2 * size, '0');
    for (std::size_t i = 0; i < size; ++i) {
        hex[2 * i] = kDigits[digest[i] >> 4];
        hex[2 * i + 1] = kDigits[digest[i] & 0xF];
    }
    return hex;
}

} // namespace

std::string sha256Hex(std::string_view bytes)
{
    unsigned char digest[crypto_hash_sha256_BYTES];
    crypto_hash_sha256(digest, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
    return toHex(digest, sizeof digest);
}

Sha256::Sha256()
{
    crypto_hash_sha256_init(&m_state);
}

void Sha256::update(const void* data, std::size_t size)
{
    crypto_hash_sha256_update(&m_state, static_cast<const unsigned char*>(data), size);
}

void Sha256::update(std::string_view bytes)
{
    update(bytes.data(), bytes.size());
}

std::string Sha256::finishHex()
{
    unsigned char digest[crypto_hash_sha256_BYTES];
    crypto_hash_sha256_final(&m_state, digest);
    crypto_hash_sha256_init(&m_state);
    return toHex(digest, sizeof digest);
}

Result<std::string> sha256OfFile(const std::filesystem::path& file)
{
    std::ifstream in(file, std::ios::binary);
    if (!in)
        return Error::make("io_error", "cannot open " + file.string());
    Sha256 hasher;
    std::vector<char> buffer(1u << 20);
    while (in) {
        in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
        hasher.update(buffer.data(), static_cast<std::size_t>(in.gcount()));
    }
    if (in.bad())
        return Error::make("io_error", "cannot read " + file.string());
    return hasher.finishHex();
}

} // namespace crowdtrain::net
