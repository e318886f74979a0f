#pragma once

// Token shards in llm.c's format, so the FineWeb/TinyStories preparation
// scripts of llm.c and modded-nanogpt feed projects unchanged:
//   header: 256 little-endian int32; [0] = 20240520 (magic), [1] = 1
//           (version), [2] = token count; the rest zero
//   body:   token count x little-endian uint16
// The file size is therefore exactly 1024 + 2 * count bytes.
//
// TokenShard maps a shard read-only; it is immutable, so concurrent reads
// are safe. TokenShardWriter writes one shard from one thread.

#include "core/file_io.h"
#include "core/result.h"

#include <cstdint>
#include <filesystem>
#include <span>

namespace crowdtrain::engine {

inline constexpr int32_t kShardMagic = 20240520;
inline constexpr int32_t kShardVersion = 1;
inline constexpr std::size_t kShardHeaderInts = 256;
inline constexpr std::size_t kShardHeaderBytes = kShardHeaderInts * sizeof(int32_t);
// header[2] is an int32.
inline constexpr uint64_t kMaxShardTokens = 2147483647;

class TokenShard {
public:
    // Maps the file and checks magic, version and size; errors name the file.
    static Result<TokenShard> open(const std::filesystem::path& file);

    TokenShard(TokenShard&& other) noexcept;
    TokenShard& operator=(TokenShard&& other) noexcept;
    TokenShard(const TokenShard&) = delete;
    TokenShard& operator=(const TokenShard&) = delete;
    ~TokenShard();

    const uint16_t* tokens() const { return m_tokens; }
    uint64_t size() const { return m_size; }
    std::span<const uint16_t> span() const { return {m_tokens, static_cast<std::size_t>(m_size)}; }
    const std::filesystem::path& path() const { return m_path; }

private:
    TokenShard() = default;
    void unmap();

    std::filesystem::path m_path;
    void* m_map = nullptr;
    std::size_t m_mapBytes = 0;
    const uint16_t* m_tokens = nullptr;
    uint64_t m_size = 0;
};

// Streams tokens into a new shard under a temporary name; finish() fills in
// the header, fsyncs and renames. Dropped unfinished, it leaves no file.
class TokenShardWriter {
public:
    static Result<TokenShardWriter> create(const std::filesystem::path& file);

    Status append(std::span<const uint16_t> tokens);
    Status finish();
    uint64_t size() const { return m_size; }

private:
    explicit TokenShardWriter(core::AtomicFile file);

    core::AtomicFile m_file;
    uint64_t m_size = 0;
};

Status writeTokenShard(const std::filesystem::path& file, std::span<const uint16_t> tokens);

} // namespace crowdtrain::engine
