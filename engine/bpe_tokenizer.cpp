#include "engine/bpe_tokenizer.h"

#include "engine/gpt2_pretokenizer.h"

#include <algorithm>
#include <limits>
#include <queue>
#include <unordered_map>

namespace crowdtrain::engine {
namespace {

// Pieces up to this many bytes use the simple quadratic BPE loop, which is
// fastest for words; longer ones (a run of digits, minified code) use the
// heap, which stays O(n log n).
constexpr std::size_t kShortPiece = 48;
// Long pieces rarely repeat, so they are not worth caching.
constexpr std::size_t kMaxCachedPiece = 256;

} // namespace

void BpeTokenizer::MergeTable::reserve(std::size_t count)
{
    std::size_t capacity = 16;
    m_shift = 60;
    while (capacity < count * 2) {
        capacity *= 2;
        --m_shift;
    }
    m_keys.assign(capacity, std::numeric_limits<uint64_t>::max());
    m_values.assign(capacity, Merge{0, 0});
}

uint64_t BpeTokenizer::MergeTable::keyOf(int32_t left, int32_t right)
{
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

std::size_t BpeTokenizer::MergeTable::slotOf(uint64_t key) const
{
    return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> m_shift);
}

void BpeTokenizer::MergeTable::insert(int32_t left, int32_t right, Merge merge)
{
    const uint64_t key = keyOf(left, right);
    const std::size_t mask = m_keys.size() - 1;
    std::size_t slot = slotOf(key);
    while (m_keys[slot] != std::numeric_limits<uint64_t>::max() && m_keys[slot] != key)
        slot = (slot + 1) & mask;
    m_keys[slot] = key;
    m_values[slot] = merge;
}

const BpeTokenizer::Merge* BpeTokenizer::MergeTable::find(int32_t left, int32_t right) const
{
    if (m_keys.empty())
        return nullptr;
    const uint64_t key = keyOf(left, right);
    const std::size_t mask = m_keys.size() - 1;
    for (std::size_t slot = slotOf(key);; slot = (slot + 1) & mask) {
        if (m_keys[slot] == key)
            return &m_values[slot];
        if (m_keys[slot] == std::numeric_limits<uint64_t>::max())
            return nullptr;
    }
}

// GPT-2's loop: merge every occurrence of the lowest-ranked adjacent pair,
// left to right, then look again.
void BpeTokenizer::bpeShort(std::vector<int32_t>& symbols) const
{
    while (symbols.size() > 1) {
        const Merge* best = nullptr;
        int32_t left = 0;
        int32_t right = 0;
        for (std::size_t i = 0; i + 1 < symbols.size(); ++i) {
            const Merge* merge = m_merges.find(symbols[i], symbols[i + 1]);
            if (merge && (!best || merge->rank < best->rank)) {
                best = merge;
                left = symbols[i];
                right = symbols[i + 1];
            }
        }
        if (!best)
            return;
        std::size_t out = 0;
        for (std::size_t i = 0; i < symbols.size();) {
            if (i + 1 < symbols.size() && symbols[i] == left && symbols[i + 1] == right) {
                symbols[out++] = best->result;
                i += 2;
            } else {
                symbols[out++] = symbols[i++];
            }
        }
        symbols.resize(out);
    }
}

// The same result as bpeShort() in O(n log n): a heap of candidate pairs.
// All occurrences of one rank are applied together, in text order, before
// pairs they create are considered, exactly like GPT-2's pass per merge.
void BpeTokenizer::bpeLong(std::vector<int32_t>& symbols) const
{
    struct Candidate {
        int32_t rank;
        int32_t pos; // index of the left symbol; merged symbols keep the left index
        int32_t left;
        int32_t right;
        bool operator>(const Candidate& other) const
        {
            return rank != other.rank ? rank > other.rank : pos > other.pos;
        }
    };
    const auto count = static_cast<int32_t>(symbols.size());
    std::vector<int32_t> next(symbols.size());
    std::vector<int32_t> prev(symbols.size());
    for (int32_t i = 0; i < count; ++i) {
        next[i] = i + 1 < count ? i + 1 : -1;
        prev[i] = i - 1;
    }
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
    const auto offer = [&](int32_t pos) {
        if (pos < 0 || next[pos] < 0)
            return;
        if (const Merge* merge = m_merges.find(symbols[pos], symbols[next[pos]]))
            heap.push({merge->rank, pos, symbols[pos], symbols[next[pos]]});
    };
    for (int32_t i = 0; i + 1 < count; ++i)
        offer(i);

    std::vector<int32_t> touched;
    while (!heap.empty()) {
        const int32_t rank = heap.top().rank;
        touched.clear();
        while (!heap.empty() && heap.top().rank == rank) {
            const Candidate c = heap.top();
            heap.pop();
            // Skip pairs an earlier merge of this pass already consumed.
            if (symbols[c.pos] != c.left || next[c.pos] < 0 || symbols[next[c.pos]] != c.right)
                continue;
            const int32_t gone = next[c.pos];
            symbols[c.pos] = m_merges.find(c.left, c.right)->result;
            symbols[gone] = -1;
            next[c.pos] = next[gone];
            if (next[gone] >= 0)
                prev[next[gone]] = c.pos;
            touched.push_back(c.pos);
        }
        for (const int32_t pos : touched) {
            if (symbols[pos] < 0)
                continue;
            offer(prev[pos]);
            offer(pos);
        }
    }
    std::erase(symbols, -1);
}

void BpeTokenizer::bpe(std::string_view piece, std::vector<int32_t>& out) const
{
    std::vector<int32_t> symbols;
    symbols.reserve(piece.size());
    for (const char byte : piece)
        symbols.push_back(m_byteToken[static_cast<unsigned char>(byte)]);
    if (symbols.size() <= kShortPiece)
        bpeShort(symbols);
    else
        bpeLong(symbols);
    out.insert(out.end(), symbols.begin(), symbols.end());
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) const
{
    std::vector<int32_t> ids;
    ids.reserve(text.size() / 3 + 16);
    // piece -> [offset, offset + count) in `cached`
    std::unordered_map<std::string_view, std::pair<uint32_t, uint32_t>> cache;
    std::vector<int32_t> cached;
    Gpt2PieceSplitter splitter(text);
    while (const auto piece = splitter.next()) {
        if (piece->size() == 1) {
            ids.push_back(m_byteToken[static_cast<unsigned char>((*piece)[0])]);
            continue;
        }
        if (const auto it = cache.find(*piece); it != cache.end()) {
            const auto first = cached.begin() + it->second.first;
            ids.insert(ids.end(), first, first + it->second.second);
            continue;
        }
        const std::size_t before = ids.size();
        bpe(*piece, ids);
        if (piece->size() <= kMaxCachedPiece) {
            const auto offset = static_cast<uint32_t>(cached.size());
            cached.insert(cached.end(), ids.begin() + static_cast<std::ptrdiff_t>(before), ids.end());
            cache.emplace(*piece, std::pair{offset, static_cast<uint32_t>(ids.size() - before)});
        }
    }
    return ids;
}

Result<std::vector<int32_t>> BpeTokenizer::tryEncode(std::string_view text) const
{
    return encode(text);
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids) const
{
    std::string text;
    text.reserve(ids.size() * 4);
    for (const int32_t id : ids) {
        if (id >= 0 && id < vocabSize())
            text += m_tokenBytes[static_cast<std::size_t>(id)];
        else
            text += kReplacementCharacter;
    }
    return text;
}

} // namespace crowdtrain::engine
