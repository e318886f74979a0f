#pragma once

// Internal to the sparse codec files: LSB-first bit fields (value i of a
// field of b-bit values occupies bits [i b, (i + 1) b) of the field; bit j
// of the field is bit j mod 8 of its byte j / 8) and the walks that cut a
// message or an update into chunks, checking every field.

#include "engine/diloco/sparse_codec.h"
#include "engine/error_codes.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

namespace crowdtrain::diloco::sparse {

class BitWriter {
public:
    explicit BitWriter(unsigned char* out)
        : m_out(out)
    { }
    void put(uint32_t value, int bits)
    {
        m_acc |= uint64_t(value) << m_bits;
        m_bits += bits;
        while (m_bits >= 8) {
            *m_out++ = static_cast<unsigned char>(m_acc);
            m_acc >>= 8;
            m_bits -= 8;
        }
    }
    // Pads the field with zero bits to a whole byte; returns the next byte.
    unsigned char* finish()
    {
        if (m_bits > 0)
            *m_out++ = static_cast<unsigned char>(m_acc);
        m_acc = 0;
        m_bits = 0;
        return m_out;
    }

private:
    unsigned char* m_out;
    uint64_t m_acc = 0;
    int m_bits = 0;
};

// Reads `count` b-bit values of a field into out; reads only the field's
// packedBytes(count, b) bytes.
inline void readField(const unsigned char* field, int64_t count, int bits, uint16_t* out)
{
    // 2-bit codes, four to a byte, without a bit accumulator.
    if (bits == 2) {
        int64_t i = 0;
        for (; i + 4 <= count; i += 4, ++field)
            for (int j = 0; j < 4; ++j)
                out[i + j] = uint16_t((field[0] >> (2 * j)) & 3);
        for (int j = 0; i < count; ++i, ++j)
            out[i] = uint16_t((field[0] >> (2 * j)) & 3);
        return;
    }
    const uint32_t mask = (1u << bits) - 1u;
    // Whole 8-byte loads while they stay inside the field (little-endian
    // hosts only: the loaded word's bit j is then the field's bit j).
    const int64_t fieldBytes = packedBytes(count, bits);
    int64_t i = 0;
    if constexpr (std::endian::native == std::endian::little) {
        for (; i < count && (i * bits >> 3) + 8 <= fieldBytes; ++i) {
            const int64_t bit = i * bits;
            uint64_t word;
            std::memcpy(&word, field + (bit >> 3), 8);
            out[i] = uint16_t((word >> (bit & 7)) & mask);
        }
    }
    field += i * bits >> 3;
    uint64_t acc = 0;
    int have = 0;
    if (const int skip = int(i * bits & 7); skip != 0) {
        acc = uint64_t(*field++) >> skip;
        have = 8 - skip;
    }
    for (; i < count; ++i) {
        while (have < bits) {
            acc |= uint64_t(*field++) << have;
            have += 8;
        }
        out[i] = uint16_t(acc & mask);
        acc >>= bits;
        have -= bits;
    }
}

inline Error badIndex(int64_t tensor, int64_t chunk, std::string what)
{
    return Error::make(engine::errc::kBadIndex,
        "tensor " + std::to_string(tensor) + ", chunk " + std::to_string(chunk) + ": " + std::move(what));
}

// Reads an index field (sparseIndexLowBits, docs/protocol.md §7
// "Indices") of count >= 1 indices of a chunk of length elements into out,
// and checks it: exactly count bits set in the high part, nothing set
// after the last of them, every index below length and above the one
// before. Reads only the field's sparseIndexBytes(count, length) bytes.
inline Status readIndices(
    const unsigned char* field, int64_t count, int64_t length, uint16_t* out, int64_t tensor, int64_t chunk)
{
    const int low = sparseIndexLowBits(count, length);
    readField(field, count, low, out);
    const unsigned char* high = field + packedBytes(count, low);
    const int64_t highBytes = packedBytes(count + ((length - 1) >> low), 1);
    int64_t found = 0;
    int64_t previous = -1; // in a register: reading out[found - 1] back stalls on the store
    // 64 high bits at a time: the loop over a word's ones exits
    // unpredictably once per word, not once per byte.
    for (int64_t byte = 0; byte < highBytes; byte += 8) {
        uint64_t word = 0;
        const int64_t take = std::min<int64_t>(8, highBytes - byte);
        for (int64_t b = 0; b < take; ++b)
            word |= uint64_t(high[byte + b]) << (8 * b);
        for (; word != 0; word &= word - 1) {
            if (found == count)
                return badIndex(tensor, chunk, "bits set after the last of " + std::to_string(count) + " indices");
            const int64_t position = byte * 8 + std::countr_zero(word);
            const int64_t index = ((position - found) << low) | int64_t(out[found]);
            if (index >= length)
                return badIndex(tensor, chunk,
                    "index " + std::to_string(index) + " outside the chunk's " + std::to_string(length) + " elements");
            if (index <= previous)
                return badIndex(tensor, chunk,
                    index == previous ? "duplicate index " + std::to_string(index)
                                      : "indices not increasing (" + std::to_string(previous) + " then "
                            + std::to_string(index) + ")");
            out[found++] = uint16_t(index);
            previous = index;
        }
    }
    if (found != count)
        return badIndex(tensor, chunk,
            "the index field holds " + std::to_string(found) + " of its " + std::to_string(count) + " indices");
    return Status::success();
}

// One chunk of a message: its first element in the flat vector, its kept
// count, indices (relative to the chunk) and 2-bit codes, and the table.
struct MessageChunk {
    int64_t first;
    int64_t count;
    const uint16_t* index;
    const uint16_t* code;
    const float* table;
};

// Walks a message given in pieces of any size (an upload's chunks, or all
// of it at once), checking tables (when check) and indices; calls onChunk
// for each chunk in order, once all its bytes are there (the bytes of an
// unfinished table or chunk wait in a small buffer). Stops at the first
// error; finish() says whether exactly the message came.
class MessageCursor {
public:
    MessageCursor(const SparseLayout& layout, bool check)
        : m_layout(&layout)
        , m_check(check)
        , m_index(static_cast<size_t>(layout.keptIn(layout.chunk())))
        , m_code(m_index.size())
    {
        skipEmptyTensors();
    }

    template <class OnChunk> Status feed(std::string_view bytes, OnChunk&& onChunk)
    {
        if (!m_status)
            return m_status;
        m_fed += int64_t(bytes.size());
        if (m_fed > m_layout->messageBytes())
            return m_status = sizeError();
        while (!bytes.empty()) {
            const auto need = static_cast<size_t>(unitBytes());
            const char* unit = bytes.data();
            if (m_pending.empty() && bytes.size() >= need) {
                bytes.remove_prefix(need);
            } else {
                const size_t n = std::min(need - m_pending.size(), bytes.size());
                m_pending.append(bytes.substr(0, n));
                bytes.remove_prefix(n);
                if (m_pending.size() < need)
                    break;
                unit = m_pending.data();
            }
            m_status = take(reinterpret_cast<const unsigned char*>(unit), onChunk);
            m_pending.clear();
            if (!m_status)
                return m_status;
        }
        return Status::success();
    }

    // The first error, or bad_size unless exactly layout.messageBytes() came.
    Status finish() const
    {
        if (!m_status)
            return m_status;
        return m_fed == m_layout->messageBytes() ? Status::success() : sizeError();
    }

private:
    // The bytes of what comes next: the tensor's table, or its chunk m_chunk.
    int64_t unitBytes() const
    {
        if (m_chunk < 0)
            return kSparseTableBytes;
        const int64_t length = chunkLength();
        const int64_t count = m_layout->keptIn(length);
        return sparseIndexBytes(count, length) + packedBytes(count, 2);
    }
    int64_t chunkLength() const
    {
        const int64_t size = m_layout->tensorElements()[m_tensor];
        return std::min(m_layout->chunk(), size - m_chunk * m_layout->chunk());
    }
    // Past the last chunk of the tensor: the next tensor's table.
    void skipEmptyTensors()
    {
        const auto& sizes = m_layout->tensorElements();
        while (m_tensor < sizes.size() && m_chunk >= 0 && m_chunk * m_layout->chunk() >= sizes[m_tensor]) {
            ++m_tensor;
            m_chunk = -1;
        }
    }

    template <class OnChunk> Status take(const unsigned char* p, OnChunk& onChunk)
    {
        if (m_chunk < 0) {
            std::memcpy(m_table, p, sizeof m_table);
            if (m_check)
                for (int c = 0; c < 4; ++c)
                    if (!std::isfinite(m_table[c]))
                        return Error::make(engine::errc::kNonFinite,
                            "tensor " + std::to_string(m_tensor) + ": table value " + std::to_string(c) + " is "
                                + std::to_string(m_table[c]));
        } else {
            const int64_t length = chunkLength();
            const int64_t count = m_layout->keptIn(length);
            if (Status ok = readIndices(p, count, length, m_index.data(), int64_t(m_tensor), m_chunk); !ok)
                return ok;
            readField(p + sparseIndexBytes(count, length), count, 2, m_code.data());
            onChunk(MessageChunk{m_layout->tensorOffsets()[m_tensor] + m_chunk * m_layout->chunk(), count,
                m_index.data(), m_code.data(), m_table});
        }
        ++m_chunk;
        skipEmptyTensors();
        return Status::success();
    }

    Error sizeError() const
    {
        return Error::make(engine::errc::kBadSize,
            "expected " + std::to_string(m_layout->messageBytes()) + " bytes for a sparse message of "
                + std::to_string(m_layout->elements()) + " elements, got "
                + (m_fed > m_layout->messageBytes() ? "more" : std::to_string(m_fed)));
    }

    const SparseLayout* m_layout;
    bool m_check;
    size_t m_tensor = 0;
    int64_t m_chunk = -1; // -1: the tensor's table comes next
    float m_table[4] = {};
    std::vector<uint16_t> m_index, m_code;
    std::string m_pending;
    int64_t m_fed = 0;
    Status m_status;
};

// Walks a whole message (MessageCursor over it at once).
template <class OnChunk>
Status walkMessage(const SparseLayout& layout, std::string_view message, bool check, OnChunk&& onChunk)
{
    MessageCursor cursor(layout, check);
    if (Status ok = cursor.feed(message, onChunk); !ok)
        return ok;
    return cursor.finish();
}

// One chunk of an update: count entries, indices relative to the chunk,
// the values (int8, or int4 sign-extended) under scale.
struct UpdateChunk {
    int64_t first;
    int64_t count;
    const uint16_t* index;
    const int8_t* q;
    float scale;
};

inline Error truncatedUpdate(int64_t expectedAtLeast, int64_t got)
{
    return Error::make(engine::errc::kBadSize,
        "sparse update truncated: needs at least " + std::to_string(expectedAtLeast) + " bytes, got "
            + std::to_string(got));
}

// Walks an update, checking its framing, indices and finiteness (when
// check); calls onChunk for each nonempty chunk.
template <class OnChunk>
Status walkUpdate(const SparseLayout& layout, std::string_view update, bool check, OnChunk&& onChunk)
{
    const auto* begin = reinterpret_cast<const unsigned char*>(update.data());
    const auto* p = begin;
    const int64_t total = int64_t(update.size());
    auto left = [&] { return total - int64_t(p - begin); };
    const int64_t chunk = layout.chunk();
    const int bits = layout.options().updateBits;
    std::vector<uint16_t> index(static_cast<size_t>(chunk));
    std::vector<uint16_t> nibbles(bits == 8 ? 0 : static_cast<size_t>(chunk));
    std::vector<int8_t> narrow(nibbles.size()); // int4 values, sign-extended
    const auto& sizes = layout.tensorElements();
    const auto& offsets = layout.tensorOffsets();
    for (size_t t = 0; t < sizes.size(); ++t) {
        for (int64_t j = 0; j * chunk < sizes[t]; ++j) {
            const int64_t length = std::min(chunk, sizes[t] - j * chunk);
            if (left() < 2)
                return truncatedUpdate(int64_t(p - begin) + 2, total);
            const int64_t count = int64_t(p[0]) | (int64_t(p[1]) << 8);
            p += 2;
            if (count == 0)
                continue;
            if (count > length)
                return badIndex(int64_t(t), j,
                    "count " + std::to_string(count) + " above the chunk's " + std::to_string(length) + " elements");
            const int64_t need = 4 + sparseIndexBytes(count, length) + packedBytes(count, bits);
            if (left() < need)
                return truncatedUpdate(int64_t(p - begin) + need, total);
            float scale;
            std::memcpy(&scale, p, 4);
            p += 4;
            if (Status ok = readIndices(p, count, length, index.data(), int64_t(t), j); !ok)
                return ok;
            p += sparseIndexBytes(count, length);
            const auto* q = reinterpret_cast<const int8_t*>(p);
            if (bits != 8) {
                readField(p, count, bits, nibbles.data());
                for (int64_t i = 0; i < count; ++i) // (v ^ 8) - 8 sign-extends
                    narrow[size_t(i)] = int8_t((nibbles[size_t(i)] ^ 8) - 8);
                q = narrow.data();
            }
            p += packedBytes(count, bits);
            if (check) {
                bool finite = std::isfinite(scale);
                for (int64_t i = 0; finite && i < count; ++i)
                    finite = std::isfinite(float(q[i]) * scale);
                if (!finite)
                    return Error::make(engine::errc::kNonFinite,
                        "tensor " + std::to_string(t) + ", chunk " + std::to_string(j) + ": scale "
                            + std::to_string(scale) + " decodes to NaN or infinity");
            }
            onChunk(UpdateChunk{offsets[t] + j * chunk, count, index.data(), q, scale});
        }
    }
    if (left() != 0)
        return Error::make(engine::errc::kBadSize,
            "sparse update longer than its chunks: " + std::to_string(left()) + " bytes left over of "
                + std::to_string(total));
    return Status::success();
}

} // namespace crowdtrain::diloco::sparse
