#pragma once

// The training windows of one task. The coordinator assigns shard ranges
// (net::Task::shards, each naming a shard file of the project's prepared data
// folder). A TokenLibrary gives a range's tokens: ShardLibrary from a copy
// of that folder on this machine (DIR/<name>, kept open), PieceLibrary
// (piece_library.h) from the coordinator, a task's ranges in one resource. A
// RangeBatchSource walks a task's ranges deterministically: windows of
// blockSize + 1 tokens, back to back with a stride of blockSize (the last
// target of one window is the first input of the next), each used once, in
// a shuffled order seeded by the ranges. Step i of a task with batch B
// trains on the windows at positions i*B .. i*B + B - 1 of that order, and
// y is x shifted by one token.
//
// Neither class is thread-safe; the shards of a library must outlive the
// sources made from it.

#include "core/result.h"
#include "engine/batch_sampler.h"
#include "engine/batch_source.h"
#include "engine/token_shard.h"
#include "net/wire/messages_common.h"

#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace crowdtrain::volunteer {

class TokenLibrary {
public:
    virtual ~TokenLibrary() = default;
    // The tokens of `range`, valid while the library lives. Errors:
    // "bad_shard_name", "missing_shard", "shard_mismatch" (outside the
    // shard), and the library's own (I/O, download).
    virtual Result<std::span<const uint16_t>> tokens(const net::ShardRange& range) = 0;
    // Called with a task's id and ranges before its tokens are asked for: a
    // library that fetches them may fetch them all at once here.
    virtual Status prepareTask(uint64_t /*taskId*/, const std::vector<net::ShardRange>& /*ranges*/)
    {
        return Status::success();
    }
    // Fetches a later task's tokens ahead of time (while another trains),
    // without touching the tokens in use; prepareTask is then quick.
    virtual Status prefetchTask(uint64_t /*taskId*/, const std::vector<net::ShardRange>& /*ranges*/)
    {
        return Status::success();
    }
    // The previous task's tokens are no longer needed.
    virtual void clear() { }
};

// Checks a shard name from a task: a plain file name. Error "bad_shard_name".
Status checkShardName(const std::string& name);

class ShardLibrary : public TokenLibrary {
public:
    explicit ShardLibrary(std::filesystem::path dataDir);

    Result<std::span<const uint16_t>> tokens(const net::ShardRange& range) override;

    // The shard DIR/<name>, opened on first use. Errors: "bad_shard_name"
    // (empty, a folder part, "." or ".."), "missing_shard" (no such file: the
    // prepared data folder is not this project's), the shard's own open error.
    Result<const engine::TokenShard*> shard(const std::string& name);

    const std::filesystem::path& dir() const { return m_dir; }

private:
    std::filesystem::path m_dir;
    std::map<std::string, std::unique_ptr<engine::TokenShard>> m_shards;
};

class RangeBatchSource : public engine::BatchSource {
public:
    // Checks every range against the local shard: "shard_mismatch" when a
    // range lies outside its shard or holds a token >= vocabSize (a different
    // data folder or tokenizer); "bad_range" when the ranges together hold
    // fewer than windowsNeeded windows (the task's steps x batch).
    static Result<std::unique_ptr<RangeBatchSource>> create(TokenLibrary& library,
        const std::vector<net::ShardRange>& ranges, int64_t blockSize, int64_t vocabSize, int64_t batchSize,
        uint64_t windowsNeeded);

    // Fills rows with the next windows in order; past the last window the
    // walk starts over (a task never asks for that many).
    void next(int64_t batch, int64_t* x, int64_t* y) override;
    uint64_t position() const override { return m_position; }
    // Batches of the task's batch size drawn so far.
    void setPosition(uint64_t batchesDrawn) override;
    int64_t blockSize() const override { return m_blockSize; }

    uint64_t windowCount() const { return m_windowEnds.empty() ? 0 : m_windowEnds.back(); }
    // The range and first token (within its shard) of window `index` (< windowCount()).
    std::pair<const net::ShardRange*, uint64_t> windowStart(uint64_t index) const;
    // Tokens of all ranges.
    uint64_t tokenCount() const { return m_tokenCount; }

private:
    RangeBatchSource() = default;

    struct Slice {
        net::ShardRange range;
        const uint16_t* tokens = nullptr; // range.beginToken's token
    };
    std::pair<const Slice*, uint64_t> locate(uint64_t index) const; // slice, token offset in it
    std::vector<Slice> m_slices;
    std::vector<uint64_t> m_windowEnds; // cumulative window counts per slice
    std::vector<uint64_t> m_order; // a seeded permutation of the windows
    int64_t m_blockSize = 0;
    int64_t m_batchSize = 0;
    uint64_t m_position = 0;
    uint64_t m_nextWindow = 0;
    uint64_t m_tokenCount = 0;
};

// Windows of blockSize + 1 tokens with stride blockSize in a range of
// `tokens` tokens: (tokens - 1) / blockSize.
uint64_t windowsIn(uint64_t tokens, int64_t blockSize);

} // namespace crowdtrain::volunteer
