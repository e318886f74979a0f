#pragma once

// A task's tokens fetched from the coordinator, so a volunteer needs nothing
// but the hub's address (docs/protocol.md, "Data pieces"). prepareTask
// downloads the task's resource "task-data/<id>" (all its ranges back to
// back, uint16 little-endian: one describe, then one fetch per 1 MiB chunk)
// with the verified, resumable transfer into a cache folder, named by its
// SHA-256, and splits it into the ranges. A task whose data is already
// cached costs the describe only. Where the coordinator does not serve
// "task-data/" (not_found), each range is fetched as the piece
// "data/<shard>/<begin>-<end>" when asked for (one describe and one fetch
// each). A cached file that was corrupted or truncated fails its SHA-256
// and is fetched again, never trained on. The cache is bounded: after each
// download the oldest files go until it is under its size cap.
//
// Not thread-safe: used from the agent's thread. The spans it returns stay
// valid until clear() or its destruction.

#include "net/transfer/download.h"
#include "net/volunteer/range_source.h"

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <vector>

namespace crowdtrain::volunteer {

class PieceLibrary : public TokenLibrary {
public:
    using SourceFactory = std::function<std::unique_ptr<net::ResourceSource>()>;

    PieceLibrary(std::filesystem::path cacheDir, uint64_t maxCacheBytes, SourceFactory source,
        const std::atomic<bool>* cancel = nullptr);

    Status prepareTask(uint64_t taskId, const std::vector<net::ShardRange>& ranges) override;
    Status prefetchTask(uint64_t taskId, const std::vector<net::ShardRange>& ranges) override;
    Result<std::span<const uint16_t>> tokens(const net::ShardRange& range) override;
    // Forgets the tokens held in memory (the files stay cached).
    void clear() override { m_held.clear(); }

    // Downloads that fetched something, and those found whole in the cache.
    uint64_t fetched() const { return m_fetched; }
    uint64_t reused() const { return m_reused; }
    // describe and fetch requests sent for data so far.
    uint64_t requests() const { return m_requests; }
    std::filesystem::path fileOf(const net::ShardRange& range) const;

private:
    // Downloads `resource` to `target` through a source that counts requests;
    // `known` answers the first describe when the caller already has it.
    Result<net::DownloadReport> download(
        const std::string& resource, const std::filesystem::path& target, const net::ResourceDescription* known);
    Result<std::vector<uint16_t>> readTokens(const std::filesystem::path& file, uint64_t count);
    // Downloads task-data/<id> into the cache; an empty path when the
    // coordinator serves ranges only. `count` is the task's token count.
    Result<std::filesystem::path> fetchTaskFile(
        uint64_t taskId, const std::vector<net::ShardRange>& ranges, uint64_t& count);
    void evict();

    std::filesystem::path m_dir;
    uint64_t m_maxBytes;
    SourceFactory m_source;
    const std::atomic<bool>* m_cancel;
    std::map<std::string, std::vector<uint16_t>> m_held;
    uint64_t m_fetched = 0;
    uint64_t m_reused = 0;
    uint64_t m_requests = 0;
};

} // namespace crowdtrain::volunteer
