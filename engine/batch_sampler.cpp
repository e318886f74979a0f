#include "engine/batch_sampler.h"

#include "engine/error_codes.h"

#include <algorithm>

namespace crowdtrain::engine {
namespace {

// splitmix64's output function: a strong 64-bit mixer, so hashing a counter
// gives an independent-looking stream that can jump anywhere in O(1).
uint64_t mix(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// A bijection of [0, n) keyed by `key`, for n >= 1: a four-round Feistel
// network on the smallest even bit width that covers n; values that land at
// n or above are mapped again until they fall inside ("cycle walking": at
// most four passes on average, since 2^width is at most 4n).
uint64_t permute(uint64_t index, uint64_t n, uint64_t key)
{
    unsigned bits = 2;
    while (bits < 62 && (uint64_t(1) << bits) < n)
        bits += 2;
    const unsigned half = bits / 2;
    const uint64_t mask = (uint64_t(1) << half) - 1;
    uint64_t value = index;
    do {
        uint64_t left = value >> half;
        uint64_t right = value & mask;
        for (uint64_t round = 0; round < 4; ++round) {
            const uint64_t next = left ^ (mix(key ^ (round << 56) ^ right) & mask);
            left = right;
            right = next;
        }
        value = (left << half) | right;
    } while (value >= n);
    return value;
}

// Tiles of a slice of `length` tokens: as many windows of block + 1 tokens,
// block apart, as fit after any offset the slice allows (at least one; more
// than one leaves room for every offset below block).
uint64_t tilesIn(uint64_t length, uint64_t block)
{
    const uint64_t most = (length - 1) / block;
    return most > 1 ? most - 1 : 1;
}

} // namespace

Result<BatchSampler> BatchSampler::create(
    std::vector<ShardSlice> slices, int64_t blockSize, uint64_t seed, Sampling sampling)
{
    if (blockSize < 1)
        return Error::make(errc::kBadArgument, "block size must be at least 1, got " + std::to_string(blockSize));
    BatchSampler sampler;
    sampler.m_blockSize = blockSize;
    sampler.m_seed = seed;
    sampler.m_sampling = sampling;
    const auto needed = static_cast<uint64_t>(blockSize) + 1;
    uint64_t windows = 0;
    uint64_t tiles = 0;
    uint64_t longest = 0;
    for (const ShardSlice& slice : slices) {
        if (!slice.shard)
            return Error::make(errc::kBadArgument, "a shard slice has no shard");
        if (slice.begin > slice.end || slice.end > slice.shard->size())
            return Error::make(errc::kBadArgument,
                slice.shard->path().string() + ": slice [" + std::to_string(slice.begin) + ", "
                    + std::to_string(slice.end) + ") is outside the shard's " + std::to_string(slice.shard->size())
                    + " tokens");
        const uint64_t length = slice.end - slice.begin;
        sampler.m_tokenCount += length;
        longest = std::max(longest, length);
        if (length < needed)
            continue;
        windows += length - needed + 1;
        tiles += tilesIn(length, uint64_t(blockSize));
        sampler.m_slices.push_back(slice);
        sampler.m_windowEnds.push_back(windows);
        sampler.m_tileEnds.push_back(tiles);
    }
    if (sampler.m_slices.empty())
        return Error::make(errc::kDataTooShort,
            "no shard slice holds block size + 1 = " + std::to_string(needed) + " tokens (longest has "
                + std::to_string(longest) + ")");
    return sampler;
}

std::pair<const ShardSlice*, uint64_t> BatchSampler::windowStart(uint64_t index) const
{
    const auto it = std::upper_bound(m_windowEnds.begin(), m_windowEnds.end(), index);
    const auto slice = static_cast<std::size_t>(it - m_windowEnds.begin());
    const uint64_t first = slice == 0 ? 0 : m_windowEnds[slice - 1];
    return {&m_slices[slice], m_slices[slice].begin + (index - first)};
}

// Lemire's multiply-and-reject: unbiased in [0, bound). Rejected draws move
// to the next attempt's counter, so the result stays a pure function.
uint64_t BatchSampler::uniform(uint64_t row, uint64_t bound) const
{
    const uint64_t base = mix(mix(mix(m_seed) ^ m_position) ^ row);
    const uint64_t threshold = (0 - bound) % bound;
    for (uint64_t attempt = 0;; ++attempt) {
        const uint64_t draw = mix(base + attempt);
        const auto product = static_cast<unsigned __int128>(draw) * bound;
        if (static_cast<uint64_t>(product) >= threshold)
            return static_cast<uint64_t>(product >> 64);
    }
}

// Draw number `draw` of the Tiles stream: epoch draw / tileCount() takes
// its tiles in the order of a permutation keyed by (seed, epoch), and each
// slice's tiles start at an offset keyed by (seed, epoch, slice).
std::pair<const ShardSlice*, uint64_t> BatchSampler::tileStart(uint64_t draw) const
{
    const uint64_t n = tileCount();
    const uint64_t epochKey = mix(mix(m_seed) ^ mix(draw / n + 1));
    const uint64_t tile = permute(draw % n, n, epochKey);
    const auto it = std::upper_bound(m_tileEnds.begin(), m_tileEnds.end(), tile);
    const auto slice = static_cast<std::size_t>(it - m_tileEnds.begin());
    const uint64_t first = slice == 0 ? 0 : m_tileEnds[slice - 1];
    const uint64_t tiles = m_tileEnds[slice] - first;
    const auto block = static_cast<uint64_t>(m_blockSize);
    const uint64_t length = m_slices[slice].end - m_slices[slice].begin;
    const uint64_t offsets = std::min(block, length - tiles * block); // starts o + k * block, k < tiles, fit
    const uint64_t offset = mix(epochKey ^ mix(slice + 1)) % offsets;
    return {&m_slices[slice], m_slices[slice].begin + offset + (tile - first) * block};
}

void BatchSampler::next(int64_t batch, int64_t* x, int64_t* y)
{
    const auto block = static_cast<std::size_t>(m_blockSize);
    for (int64_t row = 0; row < batch; ++row) {
        const auto [slice, start] = m_sampling == Sampling::Tiles
            ? tileStart(m_position * static_cast<uint64_t>(batch) + static_cast<uint64_t>(row))
            : windowStart(uniform(static_cast<uint64_t>(row), windowCount()));
        const uint16_t* tokens = slice->shard->tokens() + start;
        int64_t* xRow = x + static_cast<std::size_t>(row) * block;
        int64_t* yRow = y + static_cast<std::size_t>(row) * block;
        for (std::size_t i = 0; i < block; ++i) {
            xRow[i] = tokens[i];
            yRow[i] = tokens[i + 1];
        }
    }
    ++m_position;
}

} // namespace crowdtrain::engine
