#include "net/transfer/sha256.h"

#include <cctype>

#include "core/hex.h"

#include "net/wire/error_codes.h"

#include <fstream>
#include <vector>

namespace crowdtrain::net {

namespace { } // namespace

std::string sha256Hex(std::string_view bytes)
{
    return toHex(sha256Digest(bytes));
}

std::string anonymousTag(std::string_view publicKey)
{
    std::string tag = sha256Hex(publicKey).substr(0, 4);
    for (char& c : tag)
        c = char(std::toupper(static_cast<unsigned char>(c)));
    return tag;
}

Sha256Digest sha256Digest(std::string_view bytes)
{
    Sha256Digest digest;
    crypto_hash_sha256(digest.data(), reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
    return digest;
}

std::string toHex(const Sha256Digest& digest)
{
    return core::hexOf(digest.data(), digest.size());
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

Sha256Digest Sha256::finish()
{
    Sha256Digest digest;
    crypto_hash_sha256_final(&m_state, digest.data());
    crypto_hash_sha256_init(&m_state);
    return digest;
}

std::string Sha256::finishHex()
{
    return toHex(finish());
}

Result<std::string> sha256OfFile(const std::filesystem::path& file)
{
    std::ifstream in(file, std::ios::binary);
    if (!in)
        return Error::make(errc::kIoError, "cannot open " + file.string());
    Sha256 hasher;
    std::vector<char> buffer(1u << 20);
    while (in) {
        in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
        hasher.update(buffer.data(), static_cast<std::size_t>(in.gcount()));
    }
    if (in.bad())
        return Error::make(errc::kIoError, "cannot read " + file.string());
    return hasher.finishHex();
}

} // namespace crowdtrain::net
