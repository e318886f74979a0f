#pragma once

// The coordinator's side of a DiLoCo round: checking a submission
// (NormGate, verify) and summing accepted pseudo-gradients, weighted by
// tokens, into one fp32 accumulator of P elements (RoundAggregator). Not
// thread-safe: one round is owned by one thread.

#include "engine/diloco/codec.h"

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace crowdtrain::diloco {

// Sum of weight * decoded payload; the average divides by the total weight
// at the end (in double, rounded once to float).
class RoundAggregator {
public:
    explicit RoundAggregator(int64_t n);

    int64_t size() const { return int64_t(m_acc.size()); }

    // All or nothing: the payload is checked ("bad_size", "non_finite") and
    // the weight ("bad_weight": must be finite and > 0) before anything is
    // added.
    Status add(Codec codec, std::string_view payload, double weightTokens);

    // The same for a payload in slices (read from disk, say): begin, feed
    // every slice, commit. Slices are added as they come, so check the
    // payload first (StreamInspector + NormGate). If a slice still turns out
    // bad, the sum is spoilt: every later call, average() included, returns
    // "aggregator_failed" until reset().
    Status begin(Codec codec, double weightTokens);
    Status feed(std::string_view slice);
    Status commit();

    int64_t submissions() const { return m_submissions; }
    double totalWeight() const { return m_totalWeight; }
    bool failed() const { return m_failed.has_value(); }

    // "empty" when nothing was added.
    Result<std::vector<float>> average() const;
    void reset();

private:
    Status checkUsable() const;

    std::vector<float> m_acc;
    int64_t m_submissions = 0;
    double m_totalWeight = 0.0;
    std::optional<Error> m_failed;
    std::optional<StreamDecoder> m_stream;
    double m_streamWeight = 0.0;
};

// Norm bounds for submissions: at most factor x the median L2 norm of the
// submissions accepted in this round and the previous one, and never above
// absoluteMax. Until minReference norms are known only absoluteMax applies.
class NormGate {
public:
    struct Options {
        double factor = 4.0;
        // An AdamW step moves a weight by about lr at most, so H inner steps
        // give ||Delta|| <= H * lr * sqrt(P): 1e4 leaves room for GPT-2 small
        // with H = 500 and lr = 6e-4 (3.3e3). See adamNormCeiling().
        double absoluteMax = 1e4;
        std::size_t minReference = 1;
        // Reject norms below lowFactor x the median (0: never). A zero
        // pseudo-gradient with a token count only dilutes the average.
        double lowFactor = 0.0;
    };

    NormGate();
    explicit NormGate(Options options);

    // Why the norm is rejected ("non_finite: ...", "norm_too_large: ...",
    // "norm_too_small: ..."; the token before ':' is stable), or nothing.
    std::optional<std::string> check(double norm) const;
    // Records an accepted submission's norm.
    void accept(double norm);
    // The current round becomes the previous one.
    void closeRound();

    std::optional<double> reference() const; // the median, when there are enough norms

    // For checkpoints.
    struct State {
        std::vector<double> previousRound;
        std::vector<double> currentRound;
    };
    State state() const { return {m_previous, m_current}; }
    void restore(State state);

    const Options& options() const { return m_options; }

private:
    Options m_options;
    std::vector<double> m_previous;
    std::vector<double> m_current;
};

// 2 * innerSteps * innerLr * sqrt(elements): a generous ceiling for the
// pseudo-gradient of innerSteps AdamW steps.
double adamNormCeiling(int64_t elements, int64_t innerSteps, double innerLr);

// reason: a stable token ("bad_size", "non_finite", "norm_too_large",
// "norm_too_small"); detail: for a person.
struct SubmissionVerdict {
    bool accepted = false;
    std::string reason;
    PayloadStats stats;
    std::string detail;
};

// Checks size, finiteness and norm; the gate is not changed (call accept()
// once the submission is added).
SubmissionVerdict verify(Codec codec, std::string_view payload, int64_t n, const NormGate& gate);
// The same for stats from a StreamInspector.
SubmissionVerdict verdictOf(const Result<PayloadStats>& stats, const NormGate& gate);

} // namespace crowdtrain::diloco
