// Sparse encoding: the layout, the volunteer's top-k message with error
// feedback, and the coordinator's int8 or int4 update.
#include "engine/diloco/sparse_codec.h"

#include "engine/diloco/manifest.h"
#include "engine/diloco/sparse_bits.h"
#include "engine/error_codes.h"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <functional>
#include <sstream>

namespace crowdtrain::diloco {

using sparse::BitWriter;

Status checkSparseOptions(const SparseOptions& options)
{
    std::ostringstream why;
    if (options.chunk < 64 || options.chunk > 32768 || !std::has_single_bit(uint64_t(options.chunk)))
        why << "chunk must be a power of two in [64, 32768], got " << options.chunk;
    else if (options.k < 1 || options.k > options.chunk)
        why << "k must be in [1, chunk = " << options.chunk << "], got " << options.k;
    else if (!(options.decay >= 0.0 && options.decay <= 1.0))
        why << "decay must be in [0, 1], got " << options.decay;
    else if (options.updateBits != 4 && options.updateBits != 8)
        why << "update bits must be 4 or 8, got " << options.updateBits;
    else
        return Status::success();
    return Error::make(engine::errc::kBadOptions, "sparse codec: " + why.str());
}

Result<SparseLayout> SparseLayout::make(std::vector<int64_t> tensorElements, const SparseOptions& options)
{
    if (Status ok = checkSparseOptions(options); !ok)
        return ok.error();
    SparseLayout layout;
    layout.m_options = options;
    for (const int64_t n : tensorElements) {
        if (n < 0)
            return Error::make(engine::errc::kBadOptions, "sparse codec: negative tensor size " + std::to_string(n));
        layout.m_tensorOffsets.push_back(layout.m_elements);
        layout.m_elements += n;
        layout.m_messageBytes += kSparseTableBytes;
        for (int64_t first = 0; first < n; first += options.chunk) {
            const int64_t kept = layout.keptIn(std::min(options.chunk, n - first));
            ++layout.m_chunks;
            layout.m_messageValues += kept;
            layout.m_messageBytes += sparseIndexBytes(kept, std::min(options.chunk, n - first)) + packedBytes(kept, 2);
        }
    }
    layout.m_tensorElements = std::move(tensorElements);
    return layout;
}

Result<SparseLayout> SparseLayout::make(const Manifest& manifest, const SparseOptions& options)
{
    std::vector<int64_t> sizes;
    for (const ManifestEntry& entry : manifest.entries)
        sizes.push_back(entry.numel);
    return make(std::move(sizes), options);
}

int sparseIndexLowBits(int64_t count, int64_t length)
{
    const int64_t perIndex = count > 0 ? length / count : 0;
    return perIndex > 1 ? std::bit_width(uint64_t(perIndex)) - 1 : 0;
}

int64_t sparseIndexBytes(int64_t count, int64_t length)
{
    const int low = sparseIndexLowBits(count, length);
    return packedBytes(count, low) + packedBytes(count + ((length - 1) >> low), 1);
}

unsigned char* packSparseIndices(const uint16_t* index, int64_t count, int64_t length, unsigned char* out)
{
    const int low = sparseIndexLowBits(count, length);
    const uint32_t lowMask = (1u << low) - 1u;
    BitWriter lows(out);
    for (int64_t i = 0; i < count; ++i)
        lows.put(index[i] & lowMask, low);
    out = lows.finish();
    const int64_t highBytes = packedBytes(count + ((length - 1) >> low), 1);
    std::memset(out, 0, size_t(highBytes));
    for (int64_t i = 0; i < count; ++i) {
        const int64_t bit = (int64_t(index[i]) >> low) + i;
        out[bit >> 3] = static_cast<unsigned char>(out[bit >> 3] | (1u << (bit & 7)));
    }
    return out + highBytes;
}

namespace {

uint32_t magnitudeBits(float v)
{
    // |v| as bits: integer order is float order, and a NaN sorts above
    // infinity, so a non-finite value is always kept and poisons the table.
    return std::bit_cast<uint32_t>(v) & 0x7fffffffu;
}

// Indices (ascending) of the `kept` largest |e[0..length)|, ties to the
// lower index.
void topK(const float* e, int64_t length, int64_t kept, std::vector<uint64_t>& keys, uint16_t* out)
{
    keys.resize(size_t(length));
    for (int64_t i = 0; i < length; ++i)
        keys[size_t(i)] = (uint64_t(magnitudeBits(e[i])) << 16) | uint64_t(0xffff - i);
    if (kept < length)
        std::nth_element(keys.begin(), keys.begin() + (kept - 1), keys.end(), std::greater<>());
    for (int64_t i = 0; i < kept; ++i)
        out[i] = uint16_t(0xffff - (keys[size_t(i)] & 0xffff));
    std::sort(out, out + kept);
}

double meanOfBits(const uint32_t* bits, int64_t count)
{
    double sum = 0.0;
    for (int64_t i = 0; i < count; ++i)
        sum += double(std::bit_cast<float>(bits[i]));
    return sum / double(count);
}

// [-hi, -lo, +lo, +hi]: lo and hi the means of the lower and upper half of
// the kept magnitudes (the upper half takes the middle one of an odd count).
void tableOf(const std::vector<float>& values, float table[4])
{
    std::vector<uint32_t> magnitudes(values.size());
    for (size_t i = 0; i < values.size(); ++i)
        magnitudes[i] = magnitudeBits(values[i]);
    const auto n = int64_t(magnitudes.size());
    float lo = 0.0f;
    float hi = 0.0f;
    if (n > 0) {
        const int64_t half = n / 2;
        std::nth_element(magnitudes.begin(), magnitudes.begin() + half, magnitudes.end());
        hi = float(meanOfBits(magnitudes.data() + half, n - half));
        lo = half > 0 ? float(meanOfBits(magnitudes.data(), half)) : hi;
    }
    table[0] = -hi;
    table[1] = -lo;
    table[2] = lo;
    table[3] = hi;
}

// The nearest table value of v's sign: codes 0 (-hi), 1 (-lo), 2 (+lo), 3 (+hi).
uint16_t codeOf(float v, float middle)
{
    const bool high = std::fabs(v) >= middle;
    if (v < 0.0f)
        return high ? 0 : 1;
    return high ? 3 : 2;
}

} // namespace

void accumulateSparseError(
    const SparseLayout& layout, const float* delta, int64_t first, int64_t count, float* errorBuffer)
{
    const float beta = layout.decay();
    float* e = errorBuffer + first;
    for (int64_t i = 0; i < count; ++i)
        e[i] = beta * e[i] + delta[i];
}

std::string encodeSparse(const SparseLayout& layout, const float* delta, float* errorBuffer)
{
    accumulateSparseError(layout, delta, 0, layout.elements(), errorBuffer);
    return encodeSparseError(layout, errorBuffer);
}

std::string encodeSparseError(const SparseLayout& layout, float* errorBuffer)
{
    std::string bytes(size_t(layout.messageBytes()), '\0');
    auto* out = reinterpret_cast<unsigned char*>(bytes.data());
    const int64_t chunk = layout.chunk();
    std::vector<uint64_t> keys;
    std::vector<uint16_t> index;
    std::vector<float> kept;
    const auto& sizes = layout.tensorElements();
    const auto& offsets = layout.tensorOffsets();
    for (size_t t = 0; t < sizes.size(); ++t) {
        float* e = errorBuffer + offsets[t];
        const int64_t n = sizes[t];
        // Selection: chunk by chunk, indices relative to their chunk.
        index.clear();
        kept.clear();
        for (int64_t first = 0; first < n; first += chunk) {
            const int64_t length = std::min(chunk, n - first);
            const int64_t count = layout.keptIn(length);
            const size_t at = index.size();
            index.resize(at + size_t(count));
            topK(e + first, length, count, keys, index.data() + at);
            for (int64_t i = 0; i < count; ++i)
                kept.push_back(e[first + index[at + size_t(i)]]);
        }
        float table[4];
        tableOf(kept, table);
        std::memcpy(out, table, sizeof table);
        out += kSparseTableBytes;
        const float middle = (table[2] + table[3]) * 0.5f;
        size_t at = 0;
        for (int64_t first = 0; first < n; first += chunk) {
            const int64_t length = std::min(chunk, n - first);
            const int64_t count = layout.keptIn(length);
            out = packSparseIndices(index.data() + at, count, length, out);
            BitWriter codes(out);
            for (int64_t i = 0; i < count; ++i) {
                const uint16_t code = codeOf(kept[at + size_t(i)], middle);
                codes.put(code, 2);
                float& slot = e[first + index[at + size_t(i)]];
                slot = slot - table[code];
            }
            out = codes.finish();
            at += size_t(count);
        }
    }
    return bytes;
}

namespace {

// One chunk of an update: u16 count, and when count > 0 the float32 scale
// s = max|u| / qmax (127 for 8 bits, 7 for 4), the index field and the
// values of the entries that are nonzero and do not round to 0, as a bit
// field of `bits`-bit two's complement integers. Returns s (0 for an empty
// chunk) and leaves the chunk's entries in index/q.
struct UpdateChunkScratch {
    std::vector<uint16_t> index;
    std::vector<int8_t> q;
    int64_t count = 0;
};

float appendUpdateChunk(std::string& bytes, const float* u, int64_t length, int bits, UpdateChunkScratch& scratch)
{
    const float qmax = float((1 << (bits - 1)) - 1);
    uint32_t maxBits = 0;
    for (int64_t i = 0; i < length; ++i)
        maxBits = std::max(maxBits, magnitudeBits(u[i]));
    const float s = std::bit_cast<float>(maxBits) / qmax;
    const bool usable = s > 0.0f && std::isfinite(s);
    int64_t count = 0;
    for (int64_t i = 0; i < length; ++i) {
        if (u[i] == 0.0f)
            continue;
        int value = 0;
        if (usable) // as the int8 codec: round half away from zero
            value = int(std::clamp(std::round(u[i] / s), -qmax, qmax));
        if (value == 0 && usable)
            continue; // a non-finite scale keeps its entries, so decoders refuse it
        scratch.index[size_t(count)] = uint16_t(i);
        scratch.q[size_t(count)] = int8_t(value);
        ++count;
    }
    scratch.count = count;
    const unsigned char header[2] = {uint8_t(count & 0xff), uint8_t(count >> 8)};
    bytes.append(reinterpret_cast<const char*>(header), 2);
    if (count == 0)
        return 0.0f;
    bytes.append(reinterpret_cast<const char*>(&s), 4);
    const size_t at = bytes.size();
    bytes.resize(at + size_t(sparseIndexBytes(count, length)));
    packSparseIndices(scratch.index.data(), count, length, reinterpret_cast<unsigned char*>(bytes.data() + at));
    if (bits == 8) {
        bytes.append(reinterpret_cast<const char*>(scratch.q.data()), size_t(count));
        return s;
    }
    const size_t valuesAt = bytes.size();
    bytes.resize(valuesAt + size_t(packedBytes(count, bits)));
    BitWriter values(reinterpret_cast<unsigned char*>(bytes.data() + valuesAt));
    for (int64_t i = 0; i < count; ++i)
        values.put(uint32_t(scratch.q[size_t(i)]) & ((1u << bits) - 1), bits);
    values.finish();
    return s;
}

UpdateChunkScratch updateScratch(const SparseLayout& layout)
{
    const auto chunk = size_t(layout.chunk());
    return {std::vector<uint16_t>(chunk), std::vector<int8_t>(chunk), 0};
}

// Encodes, chunk by chunk, the entries of residual that pick(chunk's
// residual, chunk's offset, length, out) chooses (out gets their indices,
// increasing; it returns how many), and takes what was sent off residual.
template <class Pick> std::string encodeFromResidual(const SparseLayout& layout, float* residual, Pick&& pick)
{
    std::string bytes;
    UpdateChunkScratch scratch = updateScratch(layout);
    const int64_t chunk = layout.chunk();
    const int bits = layout.options().updateBits;
    std::vector<uint16_t> picked(static_cast<size_t>(chunk));
    std::vector<float> selected(static_cast<size_t>(chunk));
    const auto& sizes = layout.tensorElements();
    const auto& offsets = layout.tensorOffsets();
    for (size_t t = 0; t < sizes.size(); ++t) {
        for (int64_t first = 0; first < sizes[t]; first += chunk) {
            float* e = residual + offsets[t] + first;
            const int64_t length = std::min(chunk, sizes[t] - first);
            const int64_t kept = pick(e, offsets[t] + first, length, picked.data());
            std::fill(selected.begin(), selected.begin() + length, 0.0f);
            for (int64_t i = 0; i < kept; ++i)
                selected[picked[size_t(i)]] = e[picked[size_t(i)]];
            const float s = appendUpdateChunk(bytes, selected.data(), length, bits, scratch);
            for (int64_t i = 0; i < scratch.count; ++i) {
                float& slot = e[scratch.index[size_t(i)]];
                slot = slot - float(scratch.q[size_t(i)]) * s;
            }
        }
    }
    return bytes;
}

} // namespace

std::string encodeSparseUpdate(const SparseLayout& layout, const float* update)
{
    std::string bytes;
    UpdateChunkScratch scratch = updateScratch(layout);
    const int bits = layout.options().updateBits;
    const auto& sizes = layout.tensorElements();
    const auto& offsets = layout.tensorOffsets();
    for (size_t t = 0; t < sizes.size(); ++t)
        for (int64_t first = 0; first < sizes[t]; first += layout.chunk())
            appendUpdateChunk(
                bytes, update + offsets[t] + first, std::min(layout.chunk(), sizes[t] - first), bits, scratch);
    return bytes;
}

std::string encodeSparseUpdateTopK(const SparseLayout& layout, int64_t downK, float* residual)
{
    std::vector<uint64_t> keys;
    const int64_t chunk = layout.chunk();
    return encodeFromResidual(layout, residual, [&](float* e, int64_t, int64_t length, uint16_t* picked) {
        const int64_t kept = std::min(length, (downK * length + chunk - 1) / chunk);
        topK(e, length, kept, keys, picked);
        return kept;
    });
}

std::string encodeSparseRoundUpdate(const SparseLayout& layout, const float* u, int64_t downK, float* residual)
{
    const int64_t n = layout.elements();
    for (int64_t i = 0; i < n; ++i)
        residual[i] += u[i];
    return downK == 0 ? encodeSparseUpdateOnSupport(layout, u, residual)
                      : encodeSparseUpdateTopK(layout, downK, residual);
}

std::string encodeSparseUpdateOnSupport(const SparseLayout& layout, const float* support, float* residual)
{
    return encodeFromResidual(layout, residual, [support](float*, int64_t first, int64_t length, uint16_t* picked) {
        int64_t kept = 0;
        for (int64_t i = 0; i < length; ++i)
            if (support[first + i] != 0.0f)
                picked[kept++] = uint16_t(i);
        return kept;
    });
}

} // namespace crowdtrain::diloco
