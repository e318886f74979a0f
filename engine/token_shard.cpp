#include "engine/token_shard.h"

#include "engine/error_codes.h"

#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utility>

namespace crowdtrain::engine {

// Tokens are used in place from the mapping, which is only right where
// memory order matches the file's little-endian order.
static_assert(std::endian::native == std::endian::little, "token shards are mapped as little-endian");

namespace {

Error badShard(const std::filesystem::path& file, const std::string& what)
{
    return Error::make(errc::kBadShard, file.string() + ": " + what);
}

} // namespace

Result<TokenShard> TokenShard::open(const std::filesystem::path& file)
{
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return Error::make(errc::kNotFound, file.string() + ": no such shard");
        return core::ioError("cannot open", file, errno);
    }
    struct stat info { };
    if (::fstat(fd, &info) != 0) {
        const int error = errno;
        ::close(fd);
        return core::ioError("cannot stat", file, error);
    }
    const auto fileBytes = static_cast<uint64_t>(info.st_size);
    if (fileBytes < kShardHeaderBytes) {
        ::close(fd);
        return badShard(file,
            "truncated: " + std::to_string(fileBytes) + " bytes, expected at least the "
                + std::to_string(kShardHeaderBytes) + "-byte header");
    }
    void* map = ::mmap(nullptr, fileBytes, PROT_READ, MAP_SHARED, fd, 0);
    const int mapError = errno;
    ::close(fd); // the mapping keeps the file alive
    if (map == MAP_FAILED)
        return core::ioError("cannot map", file, mapError);

    TokenShard shard;
    shard.m_path = file;
    shard.m_map = map;
    shard.m_mapBytes = fileBytes;
    std::array<int32_t, 3> header{};
    std::memcpy(header.data(), map, sizeof header);
    if (header[0] != kShardMagic)
        return badShard(file,
            "bad magic " + std::to_string(header[0]) + " (expected " + std::to_string(kShardMagic)
                + "): not an llm.c token shard");
    if (header[1] != kShardVersion)
        return badShard(file,
            "unsupported version " + std::to_string(header[1]) + " (expected " + std::to_string(kShardVersion) + ")");
    if (header[2] < 0)
        return badShard(file, "negative token count " + std::to_string(header[2]));
    const auto count = static_cast<uint64_t>(header[2]);
    const uint64_t expected = kShardHeaderBytes + 2 * count;
    if (fileBytes != expected)
        return badShard(file,
            std::string(fileBytes < expected ? "truncated" : "trailing bytes") + ": " + std::to_string(fileBytes)
                + " bytes, expected " + std::to_string(expected) + " for " + std::to_string(count) + " tokens");
    shard.m_tokens = reinterpret_cast<const uint16_t*>(static_cast<const char*>(map) + kShardHeaderBytes);
    shard.m_size = count;
    return shard;
}

TokenShard::TokenShard(TokenShard&& other) noexcept
    : m_path(std::move(other.m_path))
    , m_map(std::exchange(other.m_map, nullptr))
    , m_mapBytes(std::exchange(other.m_mapBytes, 0))
    , m_tokens(std::exchange(other.m_tokens, nullptr))
    , m_size(std::exchange(other.m_size, 0))
{ }

TokenShard& TokenShard::operator=(TokenShard&& other) noexcept
{
    if (this != &other) {
        unmap();
        m_path = std::move(other.m_path);
        m_map = std::exchange(other.m_map, nullptr);
        m_mapBytes = std::exchange(other.m_mapBytes, 0);
        m_tokens = std::exchange(other.m_tokens, nullptr);
        m_size = std::exchange(other.m_size, 0);
    }
    return *this;
}

TokenShard::~TokenShard()
{
    unmap();
}

void TokenShard::unmap()
{
    if (m_map)
        ::munmap(m_map, m_mapBytes);
    m_map = nullptr;
    m_tokens = nullptr;
    m_size = 0;
}

TokenShardWriter::TokenShardWriter(core::AtomicFile file)
    : m_file(std::move(file))
{ }

Result<TokenShardWriter> TokenShardWriter::create(const std::filesystem::path& file)
{
    auto writer = core::AtomicFile::create(file);
    if (!writer)
        return writer.error();
    // A zero header for now: finish() writes the real one once the count is known.
    const std::array<char, kShardHeaderBytes> header{};
    if (Status status = writer->write({header.data(), header.size()}); !status)
        return status.error();
    return TokenShardWriter(std::move(*writer));
}

Status TokenShardWriter::append(std::span<const uint16_t> tokens)
{
    if (m_size + tokens.size() > kMaxShardTokens)
        return Error::make(errc::kShardTooLarge,
            m_file.target().string() + ": a shard holds at most " + std::to_string(kMaxShardTokens) + " tokens");
    m_size += tokens.size();
    return m_file.write({reinterpret_cast<const char*>(tokens.data()), tokens.size_bytes()});
}

Status TokenShardWriter::finish()
{
    std::array<int32_t, kShardHeaderInts> header{};
    header[0] = kShardMagic;
    header[1] = kShardVersion;
    header[2] = static_cast<int32_t>(m_size);
    if (Status status = m_file.writeAt(0, {reinterpret_cast<const char*>(header.data()), kShardHeaderBytes}); !status)
        return status;
    return m_file.commit();
}

Status writeTokenShard(const std::filesystem::path& file, std::span<const uint16_t> tokens)
{
    auto writer = TokenShardWriter::create(file);
    if (!writer)
        return writer.error();
    if (Status status = writer->append(tokens); !status)
        return status;
    return writer->finish();
}

} // namespace crowdtrain::engine
