#pragma once

// Internal to the codec files: the element kernels (one loop per codec,
// parameterised by what is done with each decoded value) and the framing
// walk that cuts a payload into runs. Compiled with -ffp-contract=off so
// that "d += w * v" stays a multiply then an add on every machine.

#include "engine/diloco/codec.h"
#include "engine/error_codes.h"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>

namespace crowdtrain::diloco::kernels {

static_assert(std::endian::native == std::endian::little, "payloads are little-endian");

inline int64_t valueBytes(Codec codec)
{
    return codec == Codec::Fp32 ? 4 : codec == Codec::Fp16 ? 2 : 1;
}

// IEEE binary16 <-> binary32, in integers so that FTZ/DAZ modes cannot
// change the result. Round to nearest even; NaN stays NaN (quietened).
inline uint16_t floatToHalf(float f)
{
    const uint32_t x = std::bit_cast<uint32_t>(f);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t a = x & 0x7fffffffu;
    if (a >= 0x7f800000u)
        return uint16_t(sign | (a > 0x7f800000u ? 0x7e00u | ((a >> 13) & 0x3ffu) : 0x7c00u));
    if (a >= 0x477ff000u) // >= 65520 rounds to infinity
        return uint16_t(sign | 0x7c00u);
    if (a >= 0x38800000u) { // normal half: rebias the exponent, round 13 bits away
        const uint32_t r = a - 0x38000000u;
        uint32_t h = r >> 13;
        const uint32_t rest = r & 0x1fffu;
        h += (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ? 1u : 0u;
        return uint16_t(sign | h);
    }
    if (a < 0x33000000u) // below 2^-25: rounds to zero
        return uint16_t(sign);
    // Subnormal half: the value in units of 2^-24, rounded.
    const uint32_t exponent = a >> 23;
    const uint32_t mantissa = (a & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - exponent; // 14..24
    uint32_t h = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    h += (rest > half || (rest == half && (h & 1u))) ? 1u : 0u;
    return uint16_t(sign | h);
}

// Branch-free (Maratyszcza's FP16 method) so that decode loops vectorise:
// normal halves by rebiasing through a multiply by 2^-112 (exact, and inf
// and NaN stay so), subnormal ones as (0.5 + m * 2^-24) - 0.5. Every
// intermediate is a normal float, so FTZ/DAZ modes cannot change it.
inline float halfToFloat(uint16_t h)
{
    const uint32_t w = uint32_t(h) << 16;
    const uint32_t sign = w & 0x80000000u;
    const uint32_t twoW = w + w;
    const float normalized = std::bit_cast<float>((twoW >> 4) + (0xe0u << 23)) * 0x1p-112f;
    const float denormalized = std::bit_cast<float>((twoW >> 17) | (126u << 23)) - 0.5f;
    const uint32_t magnitude
        = twoW < (1u << 27) ? std::bit_cast<uint32_t>(denormalized) : std::bit_cast<uint32_t>(normalized);
    return std::bit_cast<float>(sign | magnitude);
}

// What is done with each decoded value v at its destination d.
struct Store {
    void operator()(float& d, float v) const { d = v; }
};
struct AddWeighted {
    float weight;
    void operator()(float& d, float v) const { d += weight * v; }
};
struct Add {
    void operator()(float& d, float v) const { d += v; }
};

// A run of encoded values: count values at data, all under one int8 scale.
struct Run {
    const unsigned char* data;
    int64_t count;
    float scale;
};

// The one decode loop per codec. x = float(q) * s for int8, exactly.
template <class Op> inline void applyRun(Codec codec, const Run& run, float* __restrict dst, Op op)
{
    const int64_t count = run.count;
    if (codec == Codec::Int8) {
        const auto* __restrict q = reinterpret_cast<const int8_t*>(run.data);
        const float s = run.scale;
        for (int64_t i = 0; i < count; ++i)
            op(dst[i], float(q[i]) * s);
    } else if (codec == Codec::Fp16) {
        for (int64_t i = 0; i < count; ++i) {
            uint16_t h;
            std::memcpy(&h, run.data + 2 * i, 2);
            op(dst[i], halfToFloat(h));
        }
    } else {
        for (int64_t i = 0; i < count; ++i) {
            float v;
            std::memcpy(&v, run.data + 4 * i, 4);
            op(dst[i], v);
        }
    }
}

inline int int8MaxAbs(const int8_t* q, int64_t count)
{
    int m = 0;
    for (int64_t i = 0; i < count; ++i)
        m = std::max(m, std::abs(int(q[i])));
    return m;
}

// True when every value of the run decodes to a finite float.
inline bool runFinite(Codec codec, const Run& run)
{
    if (codec == Codec::Int8) {
        const float s = std::fabs(run.scale);
        if (!std::isfinite(s))
            return false;
        // |q| <= 128, so 128 * s stays finite below this (FLT_MAX / 127
        // itself overflows for q = -128).
        if (s <= FLT_MAX / 256.0f)
            return true;
        // Only a forged scale gets here: float(q) * s may overflow.
        const int m = int8MaxAbs(reinterpret_cast<const int8_t*>(run.data), run.count);
        return std::isfinite(float(m) * s);
    }
    bool finite = true;
    if (codec == Codec::Fp16) {
        for (int64_t i = 0; i < run.count; ++i) {
            uint16_t h;
            std::memcpy(&h, run.data + 2 * i, 2);
            finite &= (h & 0x7c00u) != 0x7c00u;
        }
    } else {
        for (int64_t i = 0; i < run.count; ++i) {
            uint32_t b;
            std::memcpy(&b, run.data + 4 * i, 4);
            finite &= (b & 0x7f800000u) != 0x7f800000u;
        }
    }
    return finite;
}

inline Error sparseRefused()
{
    return Error::make(engine::errc::kBadCodec, "sparse payloads need the model's layout (sparse_codec.h)");
}

inline Error badSize(std::string detail)
{
    return Error::make(engine::errc::kBadSize, std::move(detail));
}

// Cuts the next slice of a payload into runs and calls emit(firstElement,
// run) for each; emit returns false to stop (the caller knows why). Keeps
// a value or an int8 scale split across slices in the cursor.
template <class Emit> Status advance(detail::DecodeCursor& c, std::string_view slice, Emit&& emit, bool& stopped)
{
    stopped = false;
    const auto* p = reinterpret_cast<const unsigned char*>(slice.data());
    int64_t left = int64_t(slice.size());
    const int64_t unit = valueBytes(c.codec);
    while (left > 0) {
        if (c.element == c.n)
            return badSize("payload longer than the expected " + std::to_string(encodedBytes(c.codec, c.n))
                + " bytes for " + std::to_string(c.n) + " elements (" + std::string(codecName(c.codec)) + ")");
        if (c.codec == Codec::Int8 && c.blockLeft == 0) {
            const int64_t take = std::min<int64_t>(4 - c.pendingBytes, left);
            std::memcpy(c.pending + c.pendingBytes, p, size_t(take));
            c.pendingBytes += int(take);
            p += take;
            left -= take;
            c.bytes += take;
            if (c.pendingBytes == 4) {
                std::memcpy(&c.scale, c.pending, 4);
                c.pendingBytes = 0;
                c.blockLeft = std::min(kInt8BlockElements, c.n - c.element);
            }
            continue;
        }
        if (c.codec != Codec::Int8 && c.pendingBytes > 0) { // complete a split value
            const int64_t take = std::min<int64_t>(unit - c.pendingBytes, left);
            std::memcpy(c.pending + c.pendingBytes, p, size_t(take));
            c.pendingBytes += int(take);
            p += take;
            left -= take;
            c.bytes += take;
            if (c.pendingBytes == unit) {
                c.pendingBytes = 0;
                if (!emit(c.element, Run{c.pending, 1, 0.0f})) {
                    stopped = true;
                    return Status::success();
                }
                ++c.element;
            }
            continue;
        }
        const int64_t room = c.codec == Codec::Int8 ? c.blockLeft : c.n - c.element;
        const int64_t count = std::min(room, left / unit);
        if (count == 0) { // the start of a split value
            std::memcpy(c.pending, p, size_t(left));
            c.pendingBytes = int(left);
            c.bytes += left;
            break;
        }
        if (!emit(c.element, Run{p, count, c.scale})) {
            stopped = true;
            return Status::success();
        }
        c.element += count;
        if (c.codec == Codec::Int8)
            c.blockLeft -= count;
        p += count * unit;
        left -= count * unit;
        c.bytes += count * unit;
    }
    return Status::success();
}

inline Status finishCursor(const detail::DecodeCursor& c)
{
    if (c.element == c.n && c.pendingBytes == 0 && c.blockLeft == 0)
        return Status::success();
    return badSize("payload truncated: expected " + std::to_string(encodedBytes(c.codec, c.n)) + " bytes for "
        + std::to_string(c.n) + " elements (" + std::string(codecName(c.codec)) + "), got " + std::to_string(c.bytes));
}

} // namespace crowdtrain::diloco::kernels
