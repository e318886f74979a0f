#include "engine/diloco/aggregator.h"

#include "engine/error_codes.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

namespace crowdtrain::diloco {

namespace {

Status checkWeight(double weightTokens)
{
    if (std::isfinite(weightTokens) && weightTokens > 0.0)
        return Status::success();
    std::ostringstream message;
    message << "submission weight must be a positive token count, got " << weightTokens;
    return Error::make(engine::errc::kBadWeight, message.str());
}

// "<code>: ", how a NormGate::check reason starts.
std::string reasonPrefix(std::string_view code)
{
    return std::string(code) + ": ";
}

std::string number(double value)
{
    std::ostringstream out;
    out << value;
    return out.str();
}

} // namespace

RoundAggregator::RoundAggregator(int64_t n)
    : m_size(std::max<int64_t>(n, 0))
{ }

void RoundAggregator::allocate()
{
    if (m_acc.empty())
        m_acc.assign(std::size_t(m_size), 0.0f);
}

Status RoundAggregator::checkUsable() const
{
    if (m_failed)
        return *m_failed;
    if (m_stream)
        return Error::make(engine::errc::kBadState, "a streamed submission is in progress");
    return Status::success();
}

Status RoundAggregator::add(Codec codec, std::string_view payload, double weightTokens)
{
    if (Status usable = checkUsable(); !usable)
        return usable;
    if (Status weight = checkWeight(weightTokens); !weight)
        return weight;
    allocate();
    if (Status added = decodeAccumulate(codec, payload, size(), float(weightTokens), m_acc.data()); !added)
        return added;
    ++m_submissions;
    m_totalWeight += weightTokens;
    return Status::success();
}

Status RoundAggregator::begin(Codec codec, double weightTokens)
{
    if (Status usable = checkUsable(); !usable)
        return usable;
    if (Status weight = checkWeight(weightTokens); !weight)
        return weight;
    allocate();
    m_stream.emplace(codec, size());
    m_streamWeight = weightTokens;
    return Status::success();
}

Status RoundAggregator::feed(std::string_view slice)
{
    if (m_failed)
        return *m_failed;
    if (!m_stream)
        return Error::make(engine::errc::kBadState, "feed() without begin()");
    const float weight = float(m_streamWeight);
    float* acc = m_acc.data();
    Status fed = m_stream->feed(slice, [acc, weight](int64_t first, const float* values, int64_t count) {
        float* dst = acc + first;
        for (int64_t i = 0; i < count; ++i)
            dst[i] += weight * values[i];
    });
    if (!fed) {
        m_stream.reset();
        // Part of the payload may be in the sum already.
        m_failed = Error::make(
            engine::errc::kAggregatorFailed, "a streamed submission failed midway: " + fed.error().message);
    }
    return fed;
}

Status RoundAggregator::commit()
{
    if (m_failed)
        return *m_failed;
    if (!m_stream)
        return Error::make(engine::errc::kBadState, "commit() without begin()");
    Status finished = m_stream->finish();
    m_stream.reset();
    if (!finished) {
        m_failed = Error::make(
            engine::errc::kAggregatorFailed, "a streamed submission was truncated: " + finished.error().message);
        return finished;
    }
    ++m_submissions;
    m_totalWeight += m_streamWeight;
    return Status::success();
}

Result<std::vector<float>> RoundAggregator::average() const
{
    if (m_failed)
        return *m_failed;
    if (m_submissions == 0)
        return Error::make(engine::errc::kEmpty, "no submissions to average");
    std::vector<float> avg(m_acc.size());
    const double total = m_totalWeight;
    for (std::size_t i = 0; i < m_acc.size(); ++i)
        avg[i] = float(double(m_acc[i]) / total);
    return avg;
}

Result<std::span<float>> RoundAggregator::averageInPlace()
{
    if (m_failed)
        return *m_failed;
    if (m_submissions == 0)
        return Error::make(engine::errc::kEmpty, "no submissions to average");
    const double total = m_totalWeight;
    for (float& v : m_acc)
        v = float(double(v) / total);
    m_failed = Error::make(engine::errc::kAggregatorFailed, "the sum was averaged in place: reset() first");
    return std::span<float>(m_acc);
}

void RoundAggregator::reset()
{
    std::fill(m_acc.begin(), m_acc.end(), 0.0f);
    m_submissions = 0;
    m_totalWeight = 0.0;
    m_failed.reset();
    m_stream.reset();
}

NormGate::NormGate()
    : NormGate(Options{})
{ }

NormGate::NormGate(Options options)
    : m_options(options)
{ }

namespace {

double median(std::vector<double> values)
{
    const std::size_t mid = values.size() / 2;
    std::nth_element(values.begin(), values.begin() + std::ptrdiff_t(mid), values.end());
    if (values.size() % 2 == 1)
        return values[mid];
    const double upper = values[mid];
    const double lower = *std::max_element(values.begin(), values.begin() + std::ptrdiff_t(mid));
    return (lower + upper) / 2.0;
}

} // namespace

namespace {

// The weighted median: the smallest value with at least half the weight at
// or below it, or the mean of the two values either side of an exact half
// (so that equal weights give the ordinary median).
double weightedMedian(std::vector<std::pair<double, double>> valueWeights)
{
    std::sort(valueWeights.begin(), valueWeights.end());
    double total = 0;
    for (const auto& [value, weight] : valueWeights)
        total += weight;
    double below = 0;
    for (std::size_t i = 0; i < valueWeights.size(); ++i) {
        below += valueWeights[i].second;
        if (std::abs(below - total / 2) <= 1e-12 * total && i + 1 < valueWeights.size())
            return (valueWeights[i].first + valueWeights[i + 1].first) / 2.0;
        if (below > total / 2)
            return valueWeights[i].first;
    }
    return valueWeights.back().first;
}

} // namespace

std::optional<double> NormGate::medianOverKeys(
    const std::function<std::optional<double>(const Sample&)>& value, bool previousRound) const
{
    struct Group {
        std::vector<double> values;
        double weight = 0;
    };
    std::map<std::string, Group> byKey;
    std::vector<std::pair<double, double>> perKey;
    for (const std::vector<Sample>* round : {&m_previous, &m_current}) {
        if (round == &m_previous && !previousRound)
            continue;
        for (const Sample& sample : *round)
            if (std::optional<double> v = value(sample)) {
                const double weight = sample.weight > 0 && std::isfinite(sample.weight) ? sample.weight : 1.0;
                if (sample.who.empty()) {
                    perKey.emplace_back(*v, weight);
                } else {
                    Group& group = byKey[sample.who];
                    group.values.push_back(*v);
                    group.weight = std::max(group.weight, weight);
                }
            }
    }
    for (auto& [who, group] : byKey)
        perKey.emplace_back(median(std::move(group.values)), group.weight);
    if (perKey.empty() || perKey.size() < m_options.minReference)
        return std::nullopt;
    return weightedMedian(std::move(perKey));
}

std::optional<double> NormGate::reference() const
{
    return medianOverKeys([](const Sample& s) { return std::optional<double>(s.norm); });
}

std::optional<double> NormGate::directionReference(bool previousRound) const
{
    return medianOverKeys([](const Sample& s) { return s.cosine; }, previousRound);
}

std::optional<std::string> NormGate::check(double norm, std::optional<double> cosine, bool previousDirections) const
{
    if (!std::isfinite(norm))
        return reasonPrefix(engine::errc::kNonFinite) + "norm " + number(norm);
    if (norm > m_options.absoluteMax)
        return reasonPrefix(engine::errc::kNormTooLarge) + "norm " + number(norm) + " exceeds the ceiling "
            + number(m_options.absoluteMax);
    if (norm <= m_options.absoluteMin)
        return reasonPrefix(engine::errc::kNormTooSmall) + "norm " + number(norm) + " is at or below the floor "
            + number(m_options.absoluteMin);
    if (const std::optional<double> median = reference()) {
        if (norm > m_options.factor * *median)
            return reasonPrefix(engine::errc::kNormTooLarge) + "norm " + number(norm) + " exceeds "
                + number(m_options.factor) + " x median " + number(*median);
        if (norm < m_options.lowFactor * *median)
            return reasonPrefix(engine::errc::kNormTooSmall) + "norm " + number(norm) + " is below "
                + number(m_options.lowFactor) + " x median " + number(*median);
    }
    if (!cosine)
        return std::nullopt;
    if (!std::isfinite(*cosine))
        return reasonPrefix(engine::errc::kNonFinite) + "cosine " + number(*cosine);
    const std::optional<double> typical = directionReference(previousDirections);
    // Honest updates scatter around the typical cosine, down to about zero
    // (a fresh optimizer state, a short task). Refused: an update against
    // the momentum (a sign-flipped one sits near minus the typical), and a
    // large one across it (noise: well above the typical norm yet hardly
    // aligned; a fresh volunteer's first updates are somewhat larger).
    if (typical && *typical >= m_options.minDirection) {
        const double bound = m_options.directionFactor * *typical;
        const std::optional<double> median = reference();
        if (*cosine < -bound)
            return reasonPrefix(engine::errc::kDirection) + "cosine " + number(*cosine)
                + " with the outer momentum is below -" + number(m_options.directionFactor) + " x median "
                + number(*typical);
        if (*cosine < bound && median && norm > m_options.largeFactor * *median)
            return reasonPrefix(engine::errc::kDirection) + "cosine " + number(*cosine) + " is below "
                + number(m_options.directionFactor) + " x median " + number(*typical) + " for a norm " + number(norm)
                + " above " + number(m_options.largeFactor) + " x median " + number(*median);
    }
    return std::nullopt;
}

void NormGate::accept(double norm, std::optional<double> cosine, const std::string& who, double weight)
{
    // Bounded: a round has far fewer submissions; beyond this the median
    // of the first ones is representative.
    constexpr std::size_t kMaxNormsPerRound = 100000;
    if (cosine && !std::isfinite(*cosine))
        cosine.reset();
    if (std::isfinite(norm) && norm > m_options.absoluteMin && m_current.size() < kMaxNormsPerRound
        && std::isfinite(weight) && weight > 0)
        m_current.push_back({who, norm, cosine, weight});
}

void NormGate::forgetPreviousDirections()
{
    for (Sample& sample : m_previous)
        sample.cosine.reset();
}

void NormGate::forgetPreviousNorms()
{
    m_previous.clear();
}

void NormGate::closeRound()
{
    m_previous = std::move(m_current);
    m_current.clear();
}

void NormGate::restore(State state)
{
    m_previous = std::move(state.previousRound);
    m_current = std::move(state.currentRound);
}

double adamNormCeiling(int64_t elements, int64_t innerSteps, double innerLr)
{
    return 2.0 * double(innerSteps) * innerLr * std::sqrt(double(std::max<int64_t>(elements, 0)));
}

SubmissionVerdict verdictOf(const Result<PayloadStats>& stats, const NormGate& gate)
{
    SubmissionVerdict verdict;
    if (!stats) {
        verdict.reason = stats.error().code;
        verdict.detail = stats.error().message;
        return verdict;
    }
    verdict.stats = *stats;
    if (!stats->finite) {
        verdict.reason = engine::errc::kNonFinite;
        verdict.detail = "the payload decodes to NaN or infinity";
        return verdict;
    }
    if (std::optional<std::string> why = gate.check(stats->l2Norm)) {
        const std::size_t colon = why->find(':');
        verdict.reason = why->substr(0, colon);
        verdict.detail = colon == std::string::npos ? std::string() : why->substr(colon + 2);
        return verdict;
    }
    verdict.accepted = true;
    return verdict;
}

SubmissionVerdict verify(Codec codec, std::string_view payload, int64_t n, const NormGate& gate)
{
    return verdictOf(inspect(codec, payload, n), gate);
}

} // namespace crowdtrain::diloco
