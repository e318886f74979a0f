#include "net/volunteer/piece_library.h"

#include "engine/atomic_file.h"
#include "net/wire/error_codes.h"

#include <algorithm>
#include <cstring>

namespace crowdtrain::volunteer {

namespace {

std::string pieceName(const net::ShardRange& range)
{
    return "data/" + range.shard + "/" + std::to_string(range.beginToken) + "-" + std::to_string(range.endToken);
}

} // namespace

PieceLibrary::PieceLibrary(
    std::filesystem::path cacheDir, uint64_t maxCacheBytes, SourceFactory source, const std::atomic<bool>* cancel)
    : m_dir(std::move(cacheDir))
    , m_maxBytes(maxCacheBytes)
    , m_source(std::move(source))
    , m_cancel(cancel)
{ }

std::filesystem::path PieceLibrary::fileOf(const net::ShardRange& range) const
{
    return m_dir / range.shard / (std::to_string(range.beginToken) + "-" + std::to_string(range.endToken) + ".tokens");
}

Result<std::span<const uint16_t>> PieceLibrary::tokens(const net::ShardRange& range)
{
    if (Status s = checkShardName(range.shard); !s)
        return s.error();
    if (range.beginToken >= range.endToken)
        return Error::make(net::errc::kBadRange, "an empty range of " + range.shard);
    const std::string name = pieceName(range);
    if (auto held = m_held.find(name); held != m_held.end())
        return std::span<const uint16_t>(held->second);

    const std::filesystem::path file = fileOf(range);
    std::error_code ec;
    std::filesystem::create_directories(file.parent_path(), ec);
    if (ec)
        return Error::make(net::errc::kIoError, file.parent_path().string() + ": " + ec.message());
    auto source = m_source();
    if (!source)
        return Error::make(net::errc::kTimeout, "not connected to the coordinator to fetch " + name);
    net::DownloadOptions options;
    options.attemptsPerChunk = 2;
    options.cancel = m_cancel;
    auto report = net::Download(*source, name, file, options).run();
    if (!report)
        return report.error();
    const uint64_t count = range.endToken - range.beginToken;
    if (report->description.bytes != count * sizeof(uint16_t))
        return Error::make(net::errc::kShardMismatch,
            name + " holds " + std::to_string(report->description.bytes) + " bytes, not " + std::to_string(count)
                + " tokens");
    if (report->alreadyComplete)
        ++m_reused;
    else
        ++m_fetched;
    auto bytes = engine::readWholeFile(file);
    if (!bytes)
        return bytes.error();
    if (bytes->size() != count * sizeof(uint16_t))
        return Error::make(net::errc::kIoError, file.string() + " changed while it was read");
    std::vector<uint16_t> tokens(count);
    std::memcpy(tokens.data(), bytes->data(), bytes->size()); // the shards' own little-endian order
    // Touch it: eviction goes by last use.
    std::filesystem::last_write_time(file, std::filesystem::file_time_type::clock::now(), ec);
    evict();
    auto [it, inserted] = m_held.emplace(name, std::move(tokens));
    return std::span<const uint16_t>(it->second);
}

void PieceLibrary::evict()
{
    struct Cached {
        std::filesystem::path path;
        std::filesystem::file_time_type used;
        uint64_t bytes;
    };
    std::vector<Cached> files;
    uint64_t total = 0;
    std::error_code ec;
    for (auto it = std::filesystem::recursive_directory_iterator(m_dir, ec);
         !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
        if (!it->is_regular_file(ec))
            continue;
        const uint64_t bytes = it->file_size(ec);
        files.push_back({it->path(), it->last_write_time(ec), bytes});
        total += bytes;
    }
    if (total <= m_maxBytes)
        return;
    std::sort(files.begin(), files.end(), [](const Cached& a, const Cached& b) { return a.used < b.used; });
    for (const Cached& file : files) {
        if (total <= m_maxBytes)
            break;
        if (std::filesystem::remove(file.path, ec))
            total -= file.bytes;
    }
}

} // namespace crowdtrain::volunteer
