#include "engine/diloco/submission_encoder.h"

#include "engine/error_codes.h"

namespace crowdtrain::diloco {

SubmissionEncoder::SubmissionEncoder(Codec codec, const SparseLayout* sparse, int64_t n, float* residual)
    : m_codec(codec)
    , m_sparse(sparse)
    , m_n(n)
    , m_residual(residual)
{
    if (m_codec != Codec::Sparse)
        m_payload.assign(std::size_t(encodedBytes(m_codec, m_n)), '\0');
}

Status SubmissionEncoder::add(const float* global, const float* local, int64_t count, float* scratch)
{
    if (count < 0 || m_next + count > m_n)
        return Error::make(engine::errc::kBadSize,
            "a range of " + std::to_string(count) + " elements from " + std::to_string(m_next) + " passes "
                + std::to_string(m_n));
    if (m_next % kInt8BlockElements != 0)
        return Error::make(engine::errc::kBadSize,
            "a range after one of a length that is not a multiple of " + std::to_string(kInt8BlockElements));
    for (int64_t i = 0; i < count; ++i)
        scratch[i] = global[i] - local[i];
    if (m_codec == Codec::Sparse)
        accumulateSparseError(*m_sparse, scratch, m_next, count, m_residual);
    else
        encodeInto(m_codec, scratch, count, m_residual + m_next,
            reinterpret_cast<unsigned char*>(m_payload.data()) + encodedBytes(m_codec, m_next));
    m_next += count;
    return Status::success();
}

Result<std::string> SubmissionEncoder::finish()
{
    if (m_next != m_n)
        return Error::make(engine::errc::kBadSize,
            "the submission has " + std::to_string(m_next) + " of " + std::to_string(m_n) + " elements");
    if (m_codec == Codec::Sparse)
        return encodeSparseError(*m_sparse, m_residual);
    return std::move(m_payload);
}

} // namespace crowdtrain::diloco
