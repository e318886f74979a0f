// Decoding: whole payloads (checked in full before the output is touched)
// and payloads in slices, both walking the payload with kernels::advance and
// decoding with kernels::applyRun.
#include "engine/diloco/codec.h"

#include "engine/diloco/codec_kernels.h"
#include "engine/error_codes.h"

#include <limits>

namespace crowdtrain::diloco {

namespace {

using kernels::Run;

constexpr int64_t kBufferElements = 1024;

std::string describe(Codec codec, int64_t n)
{
    return std::to_string(n) + " elements (" + std::string(codecName(codec)) + ")";
}

Error nonFinite(Codec codec, int64_t element)
{
    return Error::make(engine::errc::kNonFinite,
        std::string(codecName(codec)) + " payload decodes to NaN or infinity at element " + std::to_string(element));
}

Status checkWholeSize(Codec codec, std::string_view bytes, int64_t n)
{
    if (n < 0)
        return kernels::badSize("negative element count " + std::to_string(n));
    if (codec == Codec::Sparse)
        return kernels::sparseRefused();
    const int64_t expected = encodedBytes(codec, n);
    if (int64_t(bytes.size()) != expected)
        return kernels::badSize("expected " + std::to_string(expected) + " bytes for " + describe(codec, n) + ", got "
            + std::to_string(bytes.size()));
    return Status::success();
}

// Size, then finiteness of every value, then op on each destination value.
template <class Op> Status decodeWhole(Codec codec, std::string_view bytes, int64_t n, float* dst, Op op)
{
    if (Status size = checkWholeSize(codec, bytes, n); !size)
        return size;
    if (n > 0 && dst == nullptr)
        return Error::make(engine::errc::kBadArgument, "no output buffer for " + describe(codec, n));
    bool stopped = false;
    int64_t badRun = 0;
    detail::DecodeCursor check{.codec = codec, .n = n};
    Status walked = kernels::advance(
        check, bytes,
        [&](int64_t first, const Run& run) {
            badRun = first;
            return kernels::runFinite(codec, run);
        },
        stopped);
    if (!walked)
        return walked;
    if (stopped)
        return nonFinite(codec, badRun);
    detail::DecodeCursor cursor{.codec = codec, .n = n};
    walked = kernels::advance(
        cursor, bytes,
        [&](int64_t first, const Run& run) {
            kernels::applyRun(codec, run, dst + first, op);
            return true;
        },
        stopped);
    if (!walked)
        return walked;
    return kernels::finishCursor(cursor);
}

} // namespace

Status decode(Codec codec, std::string_view bytes, int64_t n, float* out)
{
    return decodeWhole(codec, bytes, n, out, kernels::Store{});
}

Status decodeAccumulate(Codec codec, std::string_view bytes, int64_t n, float weight, float* acc)
{
    return decodeWhole(codec, bytes, n, acc, kernels::AddWeighted{weight});
}

Status applyUpdate(Codec codec, std::string_view bytes, int64_t n, float* params)
{
    return decodeWhole(codec, bytes, n, params, kernels::Add{});
}

Result<PayloadStats> inspect(Codec codec, std::string_view bytes, int64_t n)
{
    if (Status size = checkWholeSize(codec, bytes, n); !size)
        return size.error();
    StreamInspector inspector(codec, n);
    if (Status fed = inspector.feed(bytes); !fed)
        return fed.error();
    return inspector.finish();
}

StreamDecoder::StreamDecoder(Codec codec, int64_t n)
    : m_cursor{.codec = codec, .n = std::max<int64_t>(n, 0)}
{
    if (n < 0)
        m_status = kernels::badSize("negative element count " + std::to_string(n));
    else if (codec == Codec::Sparse)
        m_status = kernels::sparseRefused();
}

Status StreamDecoder::feed(std::string_view slice, const Sink& sink)
{
    if (!m_status)
        return m_status;
    const Codec codec = m_cursor.codec;
    const int64_t unit = kernels::valueBytes(codec);
    float buffer[kBufferElements];
    int64_t badRun = 0;
    bool stopped = false;
    Status walked = kernels::advance(
        m_cursor, slice,
        [&](int64_t first, const Run& run) {
            if (!kernels::runFinite(codec, run)) {
                badRun = first;
                return false;
            }
            for (int64_t done = 0; done < run.count; done += kBufferElements) {
                const int64_t count = std::min(kBufferElements, run.count - done);
                kernels::applyRun(codec, Run{run.data + done * unit, count, run.scale}, buffer, kernels::Store{});
                if (sink)
                    sink(first + done, buffer, count);
            }
            return true;
        },
        stopped);
    if (walked && stopped)
        walked = nonFinite(codec, badRun);
    m_status = walked;
    return walked;
}

Status StreamDecoder::finish()
{
    if (!m_status)
        return m_status;
    m_status = kernels::finishCursor(m_cursor);
    return m_status;
}

StreamInspector::StreamInspector(Codec codec, int64_t n, const float* reference)
    : m_cursor{.codec = codec, .n = std::max<int64_t>(n, 0)}
    , m_reference(reference)
{
    if (n < 0)
        m_status = kernels::badSize("negative element count " + std::to_string(n));
    else if (codec == Codec::Sparse)
        m_status = kernels::sparseRefused();
}

Status StreamInspector::feed(std::string_view slice)
{
    if (!m_status)
        return m_status;
    const Codec codec = m_cursor.codec;
    const int64_t unit = kernels::valueBytes(codec);
    bool stopped = false;
    m_status = kernels::advance(
        m_cursor, slice,
        [&](int64_t first, const Run& run) {
            if (!m_finite)
                return true; // keep walking: the length is still checked
            if (!kernels::runFinite(codec, run)) {
                m_finite = false;
                return true;
            }
            if (codec == Codec::Int8) {
                // Integer sums per run (at most one block): exact and fast.
                const auto* q = reinterpret_cast<const int8_t*>(run.data);
                int32_t squares = 0;
                for (int64_t i = 0; i < run.count; ++i)
                    squares += int32_t(q[i]) * int32_t(q[i]);
                const double s = std::fabs(double(run.scale));
                m_sumSquares += s * s * double(squares);
                const int maxQ = kernels::int8MaxAbs(q, run.count);
                m_maxAbs = std::max(m_maxAbs, double(float(maxQ) * std::fabs(run.scale)));
                if (m_reference) {
                    double dot = 0;
                    for (int64_t i = 0; i < run.count; ++i)
                        dot += double(q[i]) * double(m_reference[first + i]);
                    m_dot += double(run.scale) * dot;
                }
                return true;
            }
            float buffer[kBufferElements];
            for (int64_t done = 0; done < run.count; done += kBufferElements) {
                const int64_t count = std::min(kBufferElements, run.count - done);
                kernels::applyRun(codec, Run{run.data + done * unit, count, 0.0f}, buffer, kernels::Store{});
                // Eight lanes so that the sums do not wait on each other.
                double lanes[8] = {};
                float maxLanes[8] = {};
                int64_t i = 0;
                for (; i + 8 <= count; i += 8)
                    for (int j = 0; j < 8; ++j) {
                        const double v = buffer[i + j];
                        lanes[j] += v * v;
                        maxLanes[j] = std::max(maxLanes[j], std::fabs(buffer[i + j]));
                    }
                for (; i < count; ++i) {
                    const double v = buffer[i];
                    lanes[0] += v * v;
                    maxLanes[0] = std::max(maxLanes[0], std::fabs(buffer[i]));
                }
                for (int j = 0; j < 8; ++j) {
                    m_sumSquares += lanes[j];
                    m_maxAbs = std::max(m_maxAbs, double(maxLanes[j]));
                }
                if (m_reference) {
                    const float* reference = m_reference + first + done;
                    double dot = 0;
                    for (int64_t k = 0; k < count; ++k)
                        dot += double(buffer[k]) * double(reference[k]);
                    m_dot += dot;
                }
            }
            return true;
        },
        stopped);
    return m_status;
}

Result<PayloadStats> StreamInspector::finish()
{
    if (!m_status)
        return m_status.error();
    m_status = kernels::finishCursor(m_cursor);
    if (!m_status)
        return m_status.error();
    if (!m_finite)
        return PayloadStats{false, std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity()};
    return PayloadStats{true, std::sqrt(m_sumSquares), m_maxAbs, m_dot};
}

} // namespace crowdtrain::diloco
