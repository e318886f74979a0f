#pragma once

// The "sparse" codec of docs/protocol.md (§7, "sparse"), after SparseLoCo:
// a volunteer keeps an error-feedback buffer e <- beta * e + Delta, sends
// the k largest |e| of each chunk of C elements (chunks never straddle
// tensors) as indices plus 2-bit codes into a per-tensor table of four
// float32 values, and subtracts what it sent from e. The round's update
// goes back as the union of the messages' supports: per chunk a count,
// indices and int8 (or int4) values under one float32 scale, applied bit-exactly
// (x = float32(q) * s, then one float32 addition, no FMA).
//
// Errors: "bad_size" (wrong length), "bad_index" (an index outside its
// chunk, or not strictly increasing: a duplicate; a count above the
// chunk's length), "non_finite" (a table value or a decoded update value
// that is NaN or infinite), "bad_options" (a layout that cannot be made).
// Every decode function checks the whole payload before it touches its
// output. Free functions are thread-safe.

#include "core/result.h"
#include "engine/diloco/codec.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace crowdtrain::diloco {

struct Manifest;

// A project's sparse parameters (spec "codec": "sparse", "sparse": {...}).
struct SparseOptions {
    int64_t chunk = 4096; // elements per chunk: a power of two in [64, 32768]
    int64_t k = 64; // values kept per full chunk, in [1, chunk]
    // The error-feedback decay beta, in [0, 1]. 0.8 ended lowest of 0.6-0.99
    // in bench/RESULTS.md ("Home links, session 14").
    double decay = 0.8;
    // Bits of each value of the round's update: 4 (int4) or 8 (int8); the
    // coordinator's residual carries what rounding leaves out. 4 ended at
    // the same loss as 8 with 23 % fewer bytes (bench/RESULTS.md, "Home
    // links, session 16").
    int updateBits = 4;
};

Status checkSparseOptions(const SparseOptions& options);

// The model's tensors (their element counts, in flat-vector order) cut
// into chunks: tensor t's chunk j holds its elements [jC, min((j+1)C, N_t)).
// A chunk of L elements keeps ceil(k L / C) of them.
class SparseLayout {
public:
    static Result<SparseLayout> make(std::vector<int64_t> tensorElements, const SparseOptions& options);
    static Result<SparseLayout> make(const Manifest& manifest, const SparseOptions& options);

    int64_t elements() const { return m_elements; }
    int64_t chunk() const { return m_options.chunk; }
    int64_t k() const { return m_options.k; }
    float decay() const { return float(m_options.decay); }
    const SparseOptions& options() const { return m_options; }
    const std::vector<int64_t>& tensorElements() const { return m_tensorElements; }
    const std::vector<int64_t>& tensorOffsets() const { return m_tensorOffsets; }
    int64_t chunks() const { return m_chunks; }

    int64_t keptIn(int64_t chunkLength) const { return (m_options.k * chunkLength + chunk() - 1) / chunk(); }
    // The exact size of every submission of this layout.
    int64_t messageBytes() const { return m_messageBytes; }
    // Values a submission holds (the sum of keptIn over the chunks).
    int64_t messageValues() const { return m_messageValues; }

private:
    SparseLayout() = default;

    SparseOptions m_options;
    std::vector<int64_t> m_tensorElements;
    std::vector<int64_t> m_tensorOffsets;
    int64_t m_elements = 0;
    int64_t m_chunks = 0;
    int64_t m_messageBytes = 0;
    int64_t m_messageValues = 0;
};

inline constexpr int64_t kSparseTableBytes = 16; // four float32 per tensor

// Packed size of `count` fields of `bits` bits, padded to whole bytes.
inline int64_t packedBytes(int64_t count, int bits)
{
    return (count * bits + 7) / 8;
}

// Index fields (docs/protocol.md §7, "Indices"): the n strictly increasing
// indices of a chunk of L elements, Elias-Fano coded. With r =
// sparseIndexLowBits(n, L) = floor(log2(floor(L / n))), a field of the n
// low parts (index & (2^r - 1), r bits each), then the high parts as a bit
// vector of n + ((L - 1) >> r) bits in which the i-th index sets bit
// (index_i >> r) + i, every other bit 0. About r + 2 bits an index: 8 for
// 64 of 4096 (fixed-width indices take 12), 6 for 256 of 4096.
int sparseIndexLowBits(int64_t count, int64_t length);
int64_t sparseIndexBytes(int64_t count, int64_t length);
// Writes the field of count (>= 1) strictly increasing indices below
// length; returns the byte after it.
unsigned char* packSparseIndices(const uint16_t* index, int64_t count, int64_t length, unsigned char* out);

// --- The volunteer's message -------------------------------------------

// e <- decay * e + delta (float32, no FMA); keeps the top keptIn(L) |e| of
// each chunk (ties: the lower index), quantises them with the tensor's
// table and leaves e <- e - decoded(message). delta and errorBuffer hold
// layout.elements() floats. A NaN or an infinity in e gives a non-finite
// table, which decoders refuse.
std::string encodeSparse(const SparseLayout& layout, const float* delta, float* errorBuffer);
// encodeSparse() in two parts, so that delta can come range by range (the
// volunteer reads its local weights from the core's file chunk by chunk):
// accumulateSparseError() does e <- decay * e + delta on [first, first +
// count) (delta holds count floats), encodeSparseError() the selection,
// table and codes over e as it stands. Accumulating every range once, then
// encoding, gives encodeSparse()'s message and e bit for bit.
void accumulateSparseError(
    const SparseLayout& layout, const float* delta, int64_t first, int64_t count, float* errorBuffer);
std::string encodeSparseError(const SparseLayout& layout, float* errorBuffer);

// out[i] = decoded x[i], zero off the message's support.
Status decodeSparse(const SparseLayout& layout, std::string_view message, float* out);
// acc[i] += weight * x[i] on the support.
Status accumulateSparse(const SparseLayout& layout, std::string_view message, float weight, float* acc);
// A decoded message as (flat position, value) pairs, in flat order.
struct SparseEntries {
    std::vector<int64_t> position;
    std::vector<float> value;
};
// Norms of the decoded message (and its dot with reference, P floats, when
// given), in one walk; with entries, also the decoded values (the
// coordinator adds them without walking the bits again). Errors as
// decodeSparse; a non-finite table is "non_finite" too, never finite = false.
Result<PayloadStats> inspectSparse(const SparseLayout& layout, std::string_view message,
    const float* reference = nullptr, SparseEntries* entries = nullptr);

// inspectSparse over a message that arrives in pieces (an upload's chunks,
// on the coordinator's loop): the same statistics and errors, each piece's
// bits walked once as it comes, so that no step reads the whole message.
class SparseStreamInspector {
public:
    // Each chunk's decoded entries as they are read: flat positions, values.
    using OnEntries = std::function<void(const int64_t* position, const float* value, int64_t count)>;

    // layout and reference (P floats, or null) must outlive the inspector.
    explicit SparseStreamInspector(const SparseLayout& layout, const float* reference = nullptr);
    ~SparseStreamInspector();
    SparseStreamInspector(SparseStreamInspector&&) noexcept;
    SparseStreamInspector& operator=(SparseStreamInspector&&) noexcept;

    // The first error stays: later pieces are not read.
    Status feed(std::string_view bytes, const OnEntries& onEntries = {});
    // The statistics once exactly the message came; else the first error,
    // or bad_size.
    Result<PayloadStats> finish() const;
    // As StreamInspector's: the reference is no longer read.
    void dropReference();
    bool referenceDropped() const;

private:
    struct State;
    std::unique_ptr<State> m_state;
};

// --- The round's update --------------------------------------------------

// Encodes the nonzero elements of update (P floats) chunk by chunk, as
// updateBits-bit integers under one scale per chunk (s = max|u| / 127 for
// 8 bits, / 7 for 4); entries that round to 0 are left out. update must be
// finite.
std::string encodeSparseUpdate(const SparseLayout& layout, const float* update);
// The coordinator's union update with error feedback on its side: the
// elements of residual where support is nonzero, encoded as
// encodeSparseUpdate encodes them, and residual <- residual -
// decoded(update) on those entries; what rounding leaves out goes into a
// later round that touches the element again. residual must be finite.
std::string encodeSparseUpdateOnSupport(const SparseLayout& layout, const float* support, float* residual);
// The coordinator's re-sparsified update (error feedback on its side): per
// chunk of L elements, the ceil(downK L / C) largest |residual| (ties: the
// lower index), encoded as encodeSparseUpdate encodes them, and residual <-
// residual - decoded(update) on those entries. So the update's size does
// not grow with the number of messages in the round, and what it leaves
// out goes into a later round. residual must be finite.
std::string encodeSparseUpdateTopK(const SparseLayout& layout, int64_t downK, float* residual);
// The coordinator's whole update after its outer step u (P floats):
// residual += u, then the residual on u's support (downK 0) or its top downK
// of each chunk, as the two functions above. u and residual must be finite.
std::string encodeSparseRoundUpdate(const SparseLayout& layout, const float* u, int64_t downK, float* residual);
// params[i] += float32(q) * s on the update's support: bit-exact.
Status applySparseUpdate(const SparseLayout& layout, std::string_view update, float* params);
// out[i] = the decoded update, zero off its support.
Status decodeSparseUpdate(const SparseLayout& layout, std::string_view update, float* out);
// Entries (support size) of a well-formed update.
Result<int64_t> sparseUpdateEntries(const SparseLayout& layout, std::string_view update);

} // namespace crowdtrain::diloco
