#pragma once

// A short fingerprint of a decoded payload, to recognise a near-copy of an
// accepted one (docs/protocol.md section 6, "Checks": no credit without
// work). Dense codecs: the decoded values at kSize positions drawn once per
// project (read from the payload file where they lie); sparse: a count
// sketch of the message's entries (each entry added, with a sign, to one of
// kSize buckets, both from a hash of its position). Either way the cosine
// of two sketches estimates the cosine of the two payloads: honest updates
// of different volunteers stay well below kNearCopyCosine, a copy with a
// little noise added does not.
//
// Pure functions and a value type; thread-safe.

#include "core/result.h"
#include "engine/diloco/codec.h"
#include "engine/diloco/sparse_codec.h"

#include <filesystem>
#include <vector>

namespace crowdtrain::coordinator {

class PayloadSketch {
public:
    static constexpr std::size_t kSize = 4096;
    static constexpr double kNearCopyCosine = 0.99;

    // The positions a dense project samples (sorted; from a hash of `seed`).
    static std::vector<int64_t> positions(int64_t elements, uint64_t seed);
    // Of a dense payload in `file` (int8 or fp32; empty for fp16).
    static Result<PayloadSketch> ofDense(
        diloco::Codec codec, const std::filesystem::path& file, const std::vector<int64_t>& positions);
    // Of a sparse message's decoded entries.
    static PayloadSketch ofSparse(const diloco::SparseEntries& entries);
    // A sparse message's, built as its entries are read: empty of entries
    // (zero), then addSparse() for each batch of them.
    static PayloadSketch sparseZero();
    void addSparse(const int64_t* position, const float* value, int64_t count);

    bool empty() const { return m_values.empty(); }
    // In [-1, 1]; 0 when either is empty or zero.
    double cosine(const PayloadSketch& other) const;

private:
    std::vector<float> m_values;
};

} // namespace crowdtrain::coordinator
