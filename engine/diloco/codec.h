#pragma once

// Payload codecs of docs/protocol.md (§7, "Payload codecs"): "fp32",
// "fp16" and block-scaled "int8", all little-endian. "sparse" is named here
// too, but its payloads depend on the model's tensors: sparse_codec.h
// encodes and decodes them, and every function below refuses it
// ("bad_codec"; encode() then returns nothing, encodedBytes() 0).
// Decoding is a plain float32 multiply with no FMA contraction, so every
// machine that applies the same payload to the same weights gets the same
// bits. Free functions are thread-safe; a StreamDecoder is used by one thread.
//
// Errors: a payload of the wrong length gives code "bad_size" (message: the
// expected and the actual byte counts); a payload that decodes to a NaN or
// an infinity gives "non_finite" from every decode function, which then
// leaves its output untouched (whole-payload forms only, see StreamDecoder).

#include "core/result.h"

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace crowdtrain::diloco {

enum class Codec { Fp32, Fp16, Int8, Sparse };

inline constexpr int64_t kInt8BlockElements = 256;

std::string_view codecName(Codec codec); // "fp32", "fp16", "int8", "sparse"
Result<Codec> parseCodec(std::string_view name); // "bad_codec" if unknown

// Exact payload size for n elements: 4n, 2n, or 4*ceil(n/256) + n.
int64_t encodedBytes(Codec codec, int64_t n);

// Encodes x[0..n). With a residual (error feedback, n elements, in/out) it
// encodes x + r and leaves r = (x + r) - decode(payload).
std::string encode(Codec codec, const float* x, int64_t n, float* residual = nullptr);
// encode() written to out (encodedBytes(codec, n) bytes), so that a payload
// can be built range by range: the range [first, first + n), with first a
// multiple of kInt8BlockElements, goes to byte encodedBytes(codec, first) of
// the whole payload (its residual from element first), and the pieces are
// encode()'s payload and residual of the whole, bit for bit.
void encodeInto(Codec codec, const float* x, int64_t n, float* residual, unsigned char* out);

// out[i] = x[i].
Status decode(Codec codec, std::string_view bytes, int64_t n, float* out);
// acc[i] += weight * x[i].
Status decodeAccumulate(Codec codec, std::string_view bytes, int64_t n, float weight, float* acc);
// params[i] += x[i], exactly float32 addition of the decoded value: the
// bit-exact update of docs/protocol.md (§4 "get_update", §7).
Status applyUpdate(Codec codec, std::string_view bytes, int64_t n, float* params);

// Norms of the decoded vector. When it holds a NaN or an infinity, finite is
// false and both norms are +inf. "bad_size" for a payload of the wrong length.
struct PayloadStats {
    bool finite = true;
    double l2Norm = 0.0;
    double maxAbs = 0.0;
    double dot = 0.0; // with the StreamInspector's reference vector, when it was given one
};
Result<PayloadStats> inspect(Codec codec, std::string_view bytes, int64_t n);

namespace detail {
// Where a decoder is inside a payload; internal to codec_decode.cpp.
struct DecodeCursor {
    Codec codec = Codec::Fp32;
    int64_t n = 0;
    int64_t element = 0; // next element to produce
    int64_t bytes = 0; // consumed so far
    int64_t blockLeft = 0; // int8: values left in the current block
    float scale = 0.0f; // int8: the current block's scale
    int pendingBytes = 0; // bytes of a split scale or value kept in pending
    unsigned char pending[4] = {};
};
} // namespace detail

// Decodes a payload that arrives in slices cut anywhere (inside a value or
// a block's scale). Each decoded run goes to the sink as (index of its first
// element, values, count), in order. A run is checked before it is passed
// on, so the sink never sees a NaN or an infinity; but runs before a bad one
// have already been passed on (check the whole payload first, e.g. with
// StreamInspector, when that matters). After an error every call repeats it.
class StreamDecoder {
public:
    using Sink = std::function<void(int64_t firstElement, const float* values, int64_t count)>;

    StreamDecoder(Codec codec, int64_t n);

    // "bad_size" once the slices pass the expected length; "non_finite".
    Status feed(std::string_view slice, const Sink& sink);
    // "bad_size" unless exactly the expected bytes were fed.
    Status finish();

    int64_t bytesFed() const { return m_cursor.bytes; }
    int64_t elementsDone() const { return m_cursor.element; }

private:
    detail::DecodeCursor m_cursor;
    Status m_status;
};

// inspect() for a payload in slices: feed them all, then finish().
class StreamInspector {
public:
    // With a reference (n floats, which must outlive the inspector), finish()
    // also gives the dot product of the decoded vector with it.
    StreamInspector(Codec codec, int64_t n, const float* reference = nullptr);
    Status feed(std::string_view slice); // "bad_size" when too long
    Result<PayloadStats> finish(); // "bad_size" when short
    // The reference is no longer read (its owner is about to change it):
    // the dot product means nothing from here, which referenceDropped() says.
    void dropReference()
    {
        m_reference = nullptr;
        m_referenceDropped = true;
    }
    bool referenceDropped() const { return m_referenceDropped; }

private:
    detail::DecodeCursor m_cursor;
    Status m_status;
    bool m_finite = true;
    double m_sumSquares = 0.0;
    double m_maxAbs = 0.0;
    const float* m_reference = nullptr;
    bool m_referenceDropped = false;
    double m_dot = 0.0;
};

} // namespace crowdtrain::diloco
