#include "net/volunteer/piece_library.h"

#include "core/file_io.h"
#include "net/wire/error_codes.h"

#include <algorithm>
#include <cstring>

namespace crowdtrain::volunteer {

namespace {

std::string pieceName(const net::ShardRange& range)
{
    return "data/" + range.shard + "/" + std::to_string(range.beginToken) + "-" + std::to_string(range.endToken);
}

// Counts the requests a download sends; answers the first describe of
// `known`'s resource from it, so a description already in hand costs no
// second round trip.
class CountingSource : public net::ResourceSource {
public:
    CountingSource(net::ResourceSource& inner, uint64_t& requests, const net::ResourceDescription* known)
        : m_inner(inner)
        , m_requests(requests)
        , m_known(known)
    { }

    Result<net::ResourceDescription> describe(const std::string& resource) override
    {
        if (m_known && m_known->resource == resource) {
            net::ResourceDescription description = *m_known;
            m_known = nullptr;
            return description;
        }
        ++m_requests;
        return m_inner.describe(resource);
    }
    Result<std::string> fetch(const std::string& resource, uint64_t index) override
    {
        ++m_requests;
        return m_inner.fetch(resource, index);
    }

private:
    net::ResourceSource& m_inner;
    uint64_t& m_requests;
    const net::ResourceDescription* m_known;
};

Status checkRange(const net::ShardRange& range)
{
    if (Status s = checkShardName(range.shard); !s)
        return s;
    if (range.beginToken >= range.endToken)
        return Error::make(net::errc::kBadRange, "an empty range of " + range.shard);
    return Status::success();
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

Result<net::DownloadReport> PieceLibrary::download(
    const std::string& resource, const std::filesystem::path& target, const net::ResourceDescription* known)
{
    std::error_code ec;
    std::filesystem::create_directories(target.parent_path(), ec);
    if (ec)
        return Error::make(net::errc::kIoError, target.parent_path().string() + ": " + ec.message());
    auto source = m_source();
    if (!source)
        return Error::make(net::errc::kTimeout, "not connected to the coordinator to fetch " + resource);
    CountingSource counted(*source, m_requests, known);
    net::DownloadOptions options;
    options.attemptsPerChunk = 2;
    options.cancel = m_cancel;
    auto report = net::Download(counted, resource, target, options).run();
    if (!report)
        return report.error();
    if (report->alreadyComplete)
        ++m_reused;
    else
        ++m_fetched;
    return report;
}

Result<std::vector<uint16_t>> PieceLibrary::readTokens(const std::filesystem::path& file, uint64_t count)
{
    auto bytes = core::readFile(file);
    if (!bytes)
        return bytes.error();
    if (bytes->size() != count * sizeof(uint16_t))
        return Error::make(net::errc::kIoError, file.string() + " changed while it was read");
    std::vector<uint16_t> tokens(count);
    std::memcpy(tokens.data(), bytes->data(), bytes->size()); // the shards' own little-endian order
    // Touch it: eviction goes by last use.
    std::error_code ec;
    std::filesystem::last_write_time(file, std::filesystem::file_time_type::clock::now(), ec);
    return tokens;
}

Result<std::filesystem::path> PieceLibrary::fetchTaskFile(
    uint64_t taskId, const std::vector<net::ShardRange>& ranges, uint64_t& count)
{
    count = 0;
    for (const net::ShardRange& range : ranges) {
        if (Status s = checkRange(range); !s)
            return s.error();
        count += range.endToken - range.beginToken;
    }
    const std::string name = "task-data/" + std::to_string(taskId);
    auto source = m_source();
    if (!source)
        return Error::make(net::errc::kTimeout, "not connected to the coordinator to fetch " + name);
    ++m_requests;
    auto description = source->describe(name);
    if (!description) {
        // A coordinator that serves ranges only: tokens() fetches them one by one.
        if (description.error().code == net::errc::kNotFound)
            return std::filesystem::path();
        return description.error();
    }
    if (description->bytes != count * sizeof(uint16_t))
        return Error::make(net::errc::kShardMismatch,
            name + " holds " + std::to_string(description->bytes) + " bytes, not the task's " + std::to_string(count)
                + " tokens");
    // Named by content: a range that comes back in a later task is not fetched again.
    const std::filesystem::path file = m_dir / "tasks" / (description->sha256 + ".tokens");
    if (auto report = download(name, file, &*description); !report)
        return report.error();
    evict();
    return file;
}

Status PieceLibrary::prefetchTask(uint64_t taskId, const std::vector<net::ShardRange>& ranges)
{
    uint64_t count = 0;
    auto file = fetchTaskFile(taskId, ranges, count);
    return file ? Status::success() : Status(file.error());
}

Status PieceLibrary::prepareTask(uint64_t taskId, const std::vector<net::ShardRange>& ranges)
{
    uint64_t count = 0;
    auto file = fetchTaskFile(taskId, ranges, count);
    if (!file)
        return file.error();
    if (file->empty())
        return Status::success(); // tokens() fetches each range
    auto tokens = readTokens(*file, count);
    if (!tokens)
        return tokens.error();
    const uint16_t* next = tokens->data();
    for (const net::ShardRange& range : ranges) {
        const uint64_t n = range.endToken - range.beginToken;
        m_held.insert_or_assign(pieceName(range), std::vector<uint16_t>(next, next + n));
        next += n;
    }
    evict();
    return Status::success();
}

Result<std::span<const uint16_t>> PieceLibrary::tokens(const net::ShardRange& range)
{
    if (Status s = checkRange(range); !s)
        return s.error();
    const std::string name = pieceName(range);
    if (auto held = m_held.find(name); held != m_held.end())
        return std::span<const uint16_t>(held->second);

    const std::filesystem::path file = fileOf(range);
    auto report = download(name, file, nullptr);
    if (!report)
        return report.error();
    const uint64_t count = range.endToken - range.beginToken;
    if (report->description.bytes != count * sizeof(uint16_t))
        return Error::make(net::errc::kShardMismatch,
            name + " holds " + std::to_string(report->description.bytes) + " bytes, not " + std::to_string(count)
                + " tokens");
    auto tokens = readTokens(file, count);
    if (!tokens)
        return tokens.error();
    evict();
    auto [it, inserted] = m_held.emplace(name, std::move(*tokens));
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
