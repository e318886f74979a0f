#pragma once

// The coordinator's side of a round with the sparse codec (docs/protocol.md
// §6 "Close", sparse): each accepted message is scaled to the round's
// median norm (so one large message, hostile or not, weighs no more than a
// typical one), the scaled messages are averaged weighted by tokens, and
// the outer step is plain SGD, u = -lr * avg (error feedback on the
// volunteers replaces outer momentum, and u keeps the union of the
// messages' supports). Streaming: the median is not known until the round
// closes, but scaling is linear, so the accumulator holds
// sum_i w_i x_i / ||x_i|| and the close multiplies by the median. Memory:
// one float per parameter (from the first message on) plus one double per
// message. Not thread-safe.

#include "engine/diloco/sparse_codec.h"

#include <optional>
#include <span>
#include <vector>

namespace crowdtrain::diloco {

class SparseAggregator {
public:
    explicit SparseAggregator(SparseLayout layout);

    const SparseLayout& layout() const { return m_layout; }

    // All or nothing: the message is checked ("bad_size", "bad_index",
    // "non_finite"), the weight ("bad_weight": finite and > 0) and its norm
    // ("norm_too_small": it must be above 0) before anything is added.
    Status add(std::string_view message, double weightTokens);

    int64_t submissions() const { return int64_t(m_norms.size()); }
    double totalWeight() const { return m_totalWeight; }
    // The median of the accepted messages' norms (the mean of the middle
    // two for an even count); 0 when there are none.
    double medianNorm() const;

    // median * acc / total weight (double, rounded once to float); "empty"
    // when nothing was added.
    Result<std::vector<float>> average() const;
    // The same values over the accumulator itself (no second P floats):
    // spent until reset() (add() and the averages fail). With `norm`, the
    // messages are scaled to it instead of the median.
    Result<std::span<float>> averageInPlace(std::optional<double> norm = std::nullopt);

    // The round's close: u = float32(-lr) * avg, encoded as a sparse update
    // (encodeSparseUpdate). Apply it with applySparseUpdate.
    Result<std::string> closeRound(double outerLr) const;

    void reset();

private:
    SparseLayout m_layout;
    std::vector<float> m_acc;
    std::vector<double> m_norms;
    SparseEntries m_entries; // scratch: the message being added
    double m_totalWeight = 0.0;
    bool m_spent = false; // averaged in place
};

} // namespace crowdtrain::diloco
