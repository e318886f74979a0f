#pragma once

// A task's tokens fetched from the coordinator, so a volunteer needs nothing
// but the hub's address (docs/protocol.md, "Data pieces"): each range of a
// task is the resource "data/<shard>/<begin>-<end>" (uint16 little-endian
// tokens), downloaded with the verified, resumable transfer into a cache
// folder and read from there. Every use describes the piece again, so a
// cached file that was corrupted or truncated fails its SHA-256 and is
// fetched again, never trained on. The cache is bounded: after each
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

    Result<std::span<const uint16_t>> tokens(const net::ShardRange& range) override;
    // Forgets the pieces held in memory (the files stay cached).
    void clear() override { m_held.clear(); }

    // Pieces fetched over the network, and those found whole in the cache.
    uint64_t fetched() const { return m_fetched; }
    uint64_t reused() const { return m_reused; }
    std::filesystem::path fileOf(const net::ShardRange& range) const;

private:
    void evict();

    std::filesystem::path m_dir;
    uint64_t m_maxBytes;
    SourceFactory m_source;
    const std::atomic<bool>* m_cancel;
    std::map<std::string, std::vector<uint16_t>> m_held;
    uint64_t m_fetched = 0;
    uint64_t m_reused = 0;
};

} // namespace crowdtrain::volunteer
