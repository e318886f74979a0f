#pragma once

// A volunteer's submission built range by range: Delta = global - local is
// formed one range at a time and fed to the codec with error feedback (the
// residual), so that the whole Delta never exists at once (issue 41 item 3:
// the daemon reads the local weights from the core's file chunk by chunk).
// The payload and the residual equal those of the whole-vector path
// (pseudoGradient, then encode() or encodeSparse()) bit for bit.
//
// Ranges come in order, each starting where the last ended; every range but
// the last holds a multiple of kInt8BlockElements elements. Used by one
// thread.

#include "engine/diloco/codec.h"
#include "engine/diloco/sparse_codec.h"

#include <cstdint>
#include <string>

namespace crowdtrain::diloco {

class SubmissionEncoder {
public:
    // residual: n floats (in/out), kept by the caller; sparse: the layout
    // when codec is Sparse (then its elements() is n), else null.
    SubmissionEncoder(Codec codec, const SparseLayout* sparse, int64_t n, float* residual);

    // Delta on [next(), next() + count): global and local hold count floats
    // each; scratch holds count floats and is overwritten. "bad_size" for a
    // range past n, or a range of a length that is not a whole number of
    // blocks before the last; nothing is changed then.
    Status add(const float* global, const float* local, int64_t count, float* scratch);
    int64_t next() const { return m_next; }

    // The payload, once every element was added ("bad_size" otherwise).
    Result<std::string> finish();

private:
    Codec m_codec;
    const SparseLayout* m_sparse;
    int64_t m_n;
    float* m_residual;
    int64_t m_next = 0;
    std::string m_payload; // dense codecs: filled range by range
};

} // namespace crowdtrain::diloco
