#include "net/volunteer/range_source.h"

#include "net/wire/error_codes.h"

#include <algorithm>
#include <numeric>
#include <random>

namespace crowdtrain::volunteer {

uint64_t windowsIn(uint64_t tokens, int64_t blockSize)
{
    if (blockSize < 1 || tokens < 2)
        return 0;
    return (tokens - 1) / uint64_t(blockSize);
}

ShardLibrary::ShardLibrary(std::filesystem::path dataDir)
    : m_dir(std::move(dataDir))
{ }

Status checkShardName(const std::string& name)
{
    const std::filesystem::path asPath(name);
    if (name.empty() || name == "." || name == ".." || asPath.has_parent_path() || asPath.filename() != asPath
        || name.find('\\') != std::string::npos)
        return Error::make(
            net::errc::kBadShardName, "the task names shard '" + name + "', which is not a plain file name");
    return Status::success();
}

Result<std::span<const uint16_t>> ShardLibrary::tokens(const net::ShardRange& range)
{
    auto opened = shard(range.shard);
    if (!opened)
        return opened.error();
    const engine::TokenShard& tokens = **opened;
    if (range.beginToken >= range.endToken || range.endToken > tokens.size())
        return Error::make(net::errc::kShardMismatch,
            "the task's range [" + std::to_string(range.beginToken) + ", " + std::to_string(range.endToken) + ") of "
                + range.shard + " is outside the local shard's " + std::to_string(tokens.size())
                + " tokens (a different data folder?)");
    return std::span<const uint16_t>(tokens.tokens() + range.beginToken, range.endToken - range.beginToken);
}

Result<const engine::TokenShard*> ShardLibrary::shard(const std::string& name)
{
    if (auto it = m_shards.find(name); it != m_shards.end())
        return static_cast<const engine::TokenShard*>(it->second.get());
    if (Status s = checkShardName(name); !s)
        return s.error();
    const std::filesystem::path file = m_dir / std::filesystem::path(name);
    std::error_code ec;
    if (!std::filesystem::is_regular_file(file, ec))
        return Error::make(net::errc::kMissingShard,
            "shard " + name + " of the task is not in " + m_dir.string()
                + " (is --data this project's prepared data folder?)");
    auto opened = engine::TokenShard::open(file);
    if (!opened)
        return opened.error();
    auto stored = std::make_unique<engine::TokenShard>(std::move(*opened));
    const engine::TokenShard* pointer = stored.get();
    m_shards.emplace(name, std::move(stored));
    return pointer;
}

Result<std::unique_ptr<RangeBatchSource>> RangeBatchSource::create(TokenLibrary& library,
    const std::vector<net::ShardRange>& ranges, int64_t blockSize, int64_t vocabSize, int64_t batchSize,
    uint64_t windowsNeeded)
{
    if (blockSize < 1 || vocabSize < 1 || batchSize < 1)
        return Error::make(net::errc::kBadRange, "block size, vocabulary size and batch size must be positive");
    std::unique_ptr<RangeBatchSource> source(new RangeBatchSource());
    source->m_blockSize = blockSize;
    source->m_batchSize = batchSize;
    uint64_t windows = 0;
    for (const net::ShardRange& range : ranges) {
        auto tokens = library.tokens(range);
        if (!tokens)
            return tokens.error();
        if (tokens->size() != range.endToken - range.beginToken)
            return Error::make(net::errc::kShardMismatch, "the tokens of a range of " + range.shard + " are short");
        const uint16_t* first = tokens->data();
        const uint16_t* last = first + tokens->size();
        if (const uint16_t* big = std::find_if(first, last, [&](uint16_t t) { return int64_t(t) >= vocabSize; });
            big != last)
            return Error::make(net::errc::kShardMismatch,
                "token " + std::to_string(*big) + " at " + std::to_string(range.beginToken + uint64_t(big - first))
                    + " of " + range.shard + " is outside the model's vocabulary of " + std::to_string(vocabSize)
                    + " (a different tokenizer?)");
        source->m_tokenCount += range.endToken - range.beginToken;
        const uint64_t inRange = windowsIn(range.endToken - range.beginToken, blockSize);
        if (inRange == 0)
            continue;
        windows += inRange;
        source->m_slices.push_back({range, first});
        source->m_windowEnds.push_back(windows);
    }
    if (windows == 0 || windows < windowsNeeded)
        return Error::make(net::errc::kBadRange,
            "the task's ranges hold " + std::to_string(windows) + " windows of " + std::to_string(blockSize + 1)
                + " tokens; its steps need " + std::to_string(windowsNeeded));
    // Every window once, in an order drawn from the task's ranges: batches
    // mix the range instead of sweeping it front to back.
    source->m_order.resize(std::size_t(windows));
    std::iota(source->m_order.begin(), source->m_order.end(), uint64_t(0));
    std::seed_seq seed{ranges.front().beginToken, ranges.front().endToken, windows};
    std::mt19937_64 rng(seed);
    std::shuffle(source->m_order.begin(), source->m_order.end(), rng);
    return source;
}

std::pair<const RangeBatchSource::Slice*, uint64_t> RangeBatchSource::locate(uint64_t index) const
{
    const auto slice = std::upper_bound(m_windowEnds.begin(), m_windowEnds.end(), index) - m_windowEnds.begin();
    const uint64_t before = slice == 0 ? 0 : m_windowEnds[std::size_t(slice - 1)];
    return {&m_slices[std::size_t(slice)], (index - before) * uint64_t(m_blockSize)};
}

std::pair<const net::ShardRange*, uint64_t> RangeBatchSource::windowStart(uint64_t index) const
{
    const auto [slice, offset] = locate(index);
    return {&slice->range, slice->range.beginToken + offset};
}

void RangeBatchSource::next(int64_t batch, int64_t* x, int64_t* y)
{
    const uint64_t total = windowCount();
    const std::size_t t = std::size_t(m_blockSize);
    for (int64_t row = 0; row < batch; ++row) {
        const auto [slice, offset] = locate(m_order[std::size_t(m_nextWindow % total)]);
        const uint16_t* tokens = slice->tokens + offset;
        int64_t* xRow = x + std::size_t(row) * t;
        int64_t* yRow = y + std::size_t(row) * t;
        for (std::size_t i = 0; i < t; ++i) {
            xRow[i] = tokens[i];
            yRow[i] = tokens[i + 1];
        }
        ++m_nextWindow;
    }
    ++m_position;
}

void RangeBatchSource::setPosition(uint64_t batchesDrawn)
{
    m_position = batchesDrawn;
    m_nextWindow = batchesDrawn * uint64_t(m_batchSize);
}

} // namespace crowdtrain::volunteer
