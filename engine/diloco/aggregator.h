#pragma once

// The coordinator's side of a DiLoCo round: checking a submission
// (NormGate, verify) and summing accepted pseudo-gradients, weighted by
// tokens, into one fp32 accumulator of P elements (RoundAggregator). Not
// thread-safe: one round is owned by one thread.

#include "engine/diloco/codec.h"

#include <cstddef>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace crowdtrain::diloco {

// Sum of weight * decoded payload; the average divides by the total weight
// at the end (in double, rounded once to float).
class RoundAggregator {
public:
    // The sum's n floats are allocated at the first submission (a round
    // with no new keys never pays for their aggregator).
    explicit RoundAggregator(int64_t n);

    int64_t size() const { return m_size; }

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
    // The same values, computed over the sum itself (no second P floats):
    // the sum is spent, and every later call but reset() fails until then.
    Result<std::span<float>> averageInPlace();
    void reset();

private:
    Status checkUsable() const;
    void allocate();

    int64_t m_size = 0;
    std::vector<float> m_acc;
    int64_t m_submissions = 0;
    double m_totalWeight = 0.0;
    std::optional<Error> m_failed;
    std::optional<StreamDecoder> m_stream;
    double m_streamWeight = 0.0;
};

// The checks a submission's statistics must pass before it touches the
// model, robust to a minority of hostile keys (docs/architecture.md, "The
// submission gate"):
//  - norm: finite, above absoluteMin (a zero pseudo-gradient moves nothing
//    and would drag the statistics down), at most absoluteMax, and within
//    [lowFactor, factor] x the reference norm;
//  - direction (when the round has a reference direction, the outer
//    momentum), once the reference cosine says something (>= minDirection):
//    never below -directionFactor x the reference (against the momentum),
//    and, for a norm above largeFactor x the reference, at least directionFactor x
//    the reference (large noise across the momentum). Honest updates with
//    a cosine near zero and an ordinary norm pass.
// The references are medians over *keys* (each key's own median over this
// round and the previous one), so one key's many submissions count once,
// and only accepted submissions enter them; each key counts with its
// samples' weight (1 unless the caller says: the coordinator passes the
// key's earned trust, and records nothing of keys without any). Until
// minReference keys are known only the absolute bounds apply.
class NormGate {
public:
    struct Options {
        double factor = 4.0;
        // An AdamW step moves a weight by about lr at most, so H inner steps
        // give ||Delta|| <= H * lr * sqrt(P): 1e4 leaves room for GPT-2 small
        // with H = 500 and lr = 6e-4 (3.3e3). See adamNormCeiling().
        double absoluteMax = 1e4;
        std::size_t minReference = 1; // keys
        // Reject norms below lowFactor x the reference (0: never).
        double lowFactor = 0.25;
        // Norms at or below this are rejected whatever the reference.
        double absoluteMin = 0.0;
        double directionFactor = 0.25;
        // Norms above largeFactor x the reference must also be aligned.
        double largeFactor = 2.0;
        double minDirection = 0.05;
    };

    // One accepted submission's statistics; `who` groups them (an empty
    // `who` is a group of its own).
    struct Sample {
        std::string who;
        double norm = 0;
        std::optional<double> cosine;
        double weight = 1.0; // of the key in the weighted medians (> 0)
    };

    NormGate();
    explicit NormGate(Options options);

    // Why the submission is rejected ("non_finite: ...", "norm_too_large:
    // ...", "norm_too_small: ...", "direction: ..."; the token before ':' is
    // stable), or nothing. `cosine`: with the round's reference direction.
    // `previousDirections`: whether the previous round's cosines count in
    // the direction reference (they were measured against another
    // momentum, so the coordinator leaves them out for keys with history).
    std::optional<std::string> check(
        double norm, std::optional<double> cosine = std::nullopt, bool previousDirections = true) const;
    // Records an accepted submission (weight > 0).
    void accept(
        double norm, std::optional<double> cosine = std::nullopt, const std::string& who = {}, double weight = 1.0);
    // The current round becomes the previous one.
    void closeRound();
    // The previous round's cosines no longer count: the direction reference
    // then comes from this round's accepted submissions alone (or none).
    void forgetPreviousDirections();
    // The previous round's norms no longer count (they refuse every key
    // with history while nothing of this round is accepted).
    void forgetPreviousNorms();

    std::optional<double> reference() const; // the norm reference, when there are enough keys
    std::optional<double> directionReference(bool previousRound = true) const; // the cosine reference, likewise

    // For checkpoints.
    struct State {
        std::vector<Sample> previousRound;
        std::vector<Sample> currentRound;
    };
    State state() const { return {m_previous, m_current}; }
    void restore(State state);

    const Options& options() const { return m_options; }

private:
    // Median over groups, each with its weight, of each group's median of
    // `value` (samples without one are skipped), when at least minReference
    // groups have one.
    std::optional<double> medianOverKeys(
        const std::function<std::optional<double>(const Sample&)>& value, bool previousRound = true) const;

    Options m_options;
    std::vector<Sample> m_previous;
    std::vector<Sample> m_current;
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
