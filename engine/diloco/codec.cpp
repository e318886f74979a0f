#include "engine/diloco/codec.h"

#include "engine/diloco/codec_kernels.h"
#include "engine/error_codes.h"

namespace crowdtrain::diloco {

std::string_view codecName(Codec codec)
{
    switch (codec) {
    case Codec::Fp32:
        return "fp32";
    case Codec::Fp16:
        return "fp16";
    case Codec::Int8:
        return "int8";
    case Codec::Sparse:
        return "sparse";
    }
    return "unknown";
}

Result<Codec> parseCodec(std::string_view name)
{
    for (Codec codec : {Codec::Fp32, Codec::Fp16, Codec::Int8, Codec::Sparse})
        if (name == codecName(codec))
            return codec;
    return Error::make(
        engine::errc::kBadCodec, "unknown codec \"" + std::string(name) + "\" (expected fp32, fp16, int8 or sparse)");
}

int64_t encodedBytes(Codec codec, int64_t n)
{
    if (n <= 0 || codec == Codec::Sparse)
        return 0;
    if (codec == Codec::Int8)
        return 4 * ((n + kInt8BlockElements - 1) / kInt8BlockElements) + n;
    return kernels::valueBytes(codec) * n;
}

namespace {

// One int8 block: s = max|y| / 127 (NaN or inf when y holds one), then
// q = clamp(round_half_away_from_zero(y / s), -127, 127).
void encodeInt8Block(const float* __restrict y, int64_t count, unsigned char* out)
{
    // |y| as bits: their integer order is the float order, and a NaN's bits
    // exceed infinity's, so the maximum carries any non-finite value.
    uint32_t maxBits = 0;
    for (int64_t i = 0; i < count; ++i)
        maxBits = std::max(maxBits, std::bit_cast<uint32_t>(y[i]) & 0x7fffffffu);
    const float s = std::bit_cast<float>(maxBits) / 127.0f;
    std::memcpy(out, &s, 4);
    auto* __restrict q = reinterpret_cast<int8_t*>(out + 4);
    if (!(s > 0.0f) || !std::isfinite(s)) {
        std::memset(q, 0, size_t(count));
        return;
    }
    if (s < FLT_MIN) {
        // A subnormal scale loses precision, so y / s may leave [-127, 127].
        for (int64_t i = 0; i < count; ++i)
            q[i] = int8_t(std::clamp(std::round(y[i] / s), -127.0f, 127.0f));
        return;
    }
    // Here |y / s| <= 127 * (1 + 2^-23), so no clamp is needed, and the
    // branch-free rounding below lets the loop vectorise.
    for (int64_t i = 0; i < count; ++i) {
        const float t = y[i] / s;
        const int truncated = int(t); // toward zero; t - truncated is exact
        const float fraction = t - float(truncated);
        q[i] = int8_t(truncated + int(fraction >= 0.5f) - int(fraction <= -0.5f));
    }
}

void encodeFp16Run(const float* y, int64_t count, unsigned char* out)
{
    for (int64_t i = 0; i < count; ++i) {
        const uint16_t h = kernels::floatToHalf(y[i]);
        std::memcpy(out + 2 * i, &h, 2);
    }
}

} // namespace

std::string encode(Codec codec, const float* x, int64_t n, float* residual)
{
    if (codec == Codec::Sparse)
        return {};
    std::string bytes(size_t(encodedBytes(codec, n)), '\0');
    encodeInto(codec, x, n, residual, reinterpret_cast<unsigned char*>(bytes.data()));
    return bytes;
}

void encodeInto(Codec codec, const float* x, int64_t n, float* residual, unsigned char* out)
{
    if (codec == Codec::Sparse)
        return;
    float y[kInt8BlockElements];
    float decoded[kInt8BlockElements];
    const int64_t unit = kernels::valueBytes(codec);
    // Block by block, so that the residual is updated while the block is hot.
    for (int64_t first = 0; first < n; first += kInt8BlockElements) {
        const int64_t count = std::min(kInt8BlockElements, n - first);
        if (residual) {
            for (int64_t i = 0; i < count; ++i)
                y[i] = x[first + i] + residual[first + i];
        } else {
            std::memcpy(y, x + first, size_t(count) * sizeof(float));
        }
        kernels::Run run{out, count, 0.0f};
        if (codec == Codec::Int8) {
            encodeInt8Block(y, count, out);
            std::memcpy(&run.scale, out, 4);
            run.data = out + 4;
            out += 4 + count;
        } else {
            if (codec == Codec::Fp16)
                encodeFp16Run(y, count, out);
            else
                std::memcpy(out, y, size_t(count) * sizeof(float));
            out += unit * count;
        }
        if (residual) {
            kernels::applyRun(codec, run, decoded, kernels::Store{});
            for (int64_t i = 0; i < count; ++i)
                residual[first + i] = y[i] - decoded[i];
        }
    }
}

} // namespace crowdtrain::diloco
