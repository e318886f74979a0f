// Submissions: what the gate keeps between submissions and rounds (its
// statistics, the keys' trust, the accepted payloads' hashes and sketches),
// the checks that use them beyond the norm gate (elements, copies), and
// what a closed round leaves in the state file and the log
// (docs/architecture.md "The submission gate").

#include "net/coordinator/submissions.h"

#include "core/file_io.h"
#include "core/slow_work.h"
#include "net/wire/error_codes.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

namespace crowdtrain::coordinator {
namespace {

std::string number(double value)
{
    char text[32];
    std::snprintf(text, sizeof text, "%.4g", value);
    return text;
}

// `evaluateRate`: the spec's trust.evaluate.rate (0: no evaluation, every
// accepted submission earns its share).
std::vector<KeyTrust::Contribution> contributionsOf(const std::vector<AcceptedSubmission>& round, double evaluateRate)
{
    std::vector<KeyTrust::Contribution> out;
    for (const AcceptedSubmission& a : round) {
        const double credit = evaluateRate <= 0 ? 1.0 : a.evaluated ? 1.0 / std::min(1.0, evaluateRate) : 0.0;
        out.push_back({a.record.publicKey, double(a.record.tokens) * a.clip, a.fresh, credit});
    }
    return out;
}

} // namespace

std::vector<KeyTrust::Contribution> Submissions::roundContributions() const
{
    return contributionsOf(m_roundAccepted, m_scorer ? m_spec.trust.evaluateRate : 0.0);
}

Status Submissions::open(const std::string& record)
{
    std::filesystem::create_directories(pendingDir());
    takeDirection();
    if (m_calibration) { // the project's first reference: before anything is served
        m_calibration->start(m_round.version(), m_round.sharedParams(), m_round.momentum());
        takeCalibration(true);
    }
    if (record.empty()) { // version 0, or written before the norms were kept
        restoreGate({});
        return Status::success();
    }
    const auto json = nlohmann::json::parse(record, nullptr, false);
    if (!json.is_object() || !json.contains("accepted_norms") || !json["accepted_norms"].is_array())
        return Error::make(net::errc::kStateCorrupt, "the state file's service bytes are not a norm record");
    if (json.contains("trust"))
        if (Status s = m_trust.fromJson(json["trust"]); !s)
            return s;
    const auto shas = json.value("accepted_sha256", nlohmann::json::array());
    if (!shas.is_array())
        return Error::make(net::errc::kStateCorrupt, "the state file's accepted_sha256 is not a list");
    for (const auto& sha : shas)
        if (sha.is_string())
            m_previousShas.insert(sha.get<std::string>());
    const auto& norms = json["accepted_norms"];
    const auto keys = json.value("accepted_keys", nlohmann::json::array());
    const auto cosines = json.value("accepted_cosines", nlohmann::json::array());
    if (!keys.is_array() || !cosines.is_array() || (!keys.empty() && keys.size() != norms.size())
        || (!cosines.empty() && cosines.size() != norms.size()))
        return Error::make(net::errc::kStateCorrupt, "the state file's gate record has arrays of different lengths");
    std::vector<diloco::NormGate::Sample> samples;
    for (std::size_t i = 0; i < norms.size(); ++i) {
        const auto& norm = norms[i];
        if (!norm.is_number() || !std::isfinite(norm.get<double>()) || norm.get<double>() < 0)
            return Error::make(net::errc::kStateCorrupt, "the state file's accepted norms hold " + norm.dump());
        diloco::NormGate::Sample sample{"", norm.get<double>(), std::nullopt};
        if (!keys.empty() && keys[i].is_string()) {
            sample.who = keys[i].get<std::string>();
            sample.weight = m_trust.trust(sample.who);
            if (sample.weight <= 0) // written before keys had trust: it had earned some
                sample.weight = KeyTrust::kEstablishedTrust;
        }
        if (!cosines.empty() && cosines[i].is_number())
            sample.cosine = cosines[i].get<double>();
        samples.push_back(std::move(sample));
    }
    if (!m_defences)
        samples.clear();
    restoreGate(std::move(samples));
    return Status::success();
}

// The state file's service bytes: what the gate measured of the accepted
// submissions of the round it closes, which the gate compares the next
// round's submissions with (keys, norms, cosines: parallel arrays).
std::string Submissions::gateRecord() const
{
    nlohmann::json norms = nlohmann::json::array(), keys = nlohmann::json::array(), cosines = nlohmann::json::array(),
                   shas = nlohmann::json::array();
    for (const AcceptedSubmission& a : m_round.accepted()) {
        norms.push_back(a.gate.norm);
        keys.push_back(a.record.publicKey);
        cosines.push_back(a.gate.cosine ? nlohmann::json(*a.gate.cosine) : nlohmann::json());
        shas.push_back(a.record.payloadSha256);
    }
    return nlohmann::json{{"accepted_norms", norms}, {"accepted_keys", keys}, {"accepted_cosines", cosines},
        {"accepted_sha256", shas}, {"trust", m_trust.afterRound(roundContributions()).toJson()}}
        .dump();
}

void Submissions::roundClosed()
{
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(pendingDir(), ec))
        std::filesystem::remove(entry.path(), ec);
    logClosedRound();
    // The closed round's keys earned their share; its statistics become the
    // previous round's, each key weighing its trust (keys that were new now
    // have a little).
    m_trust = m_trust.afterRound(roundContributions());
    std::vector<diloco::NormGate::Sample> previous;
    m_previousShas.clear();
    for (const AcceptedSubmission& a : m_roundAccepted) {
        m_previousShas.insert(a.record.payloadSha256);
        const double weight = m_trust.trust(a.record.publicKey);
        if (weight > 0 && m_defences)
            previous.push_back({a.record.publicKey, a.gate.norm, a.gate.cosine, weight});
    }
    restoreGate(std::move(previous));
    m_roundAccepted.clear();
    m_previousSketches = std::move(m_roundSketches);
    m_roundSketches.clear();
    m_refusals.clear();
    m_previousChanges = std::move(m_roundChanges);
    m_roundChanges.clear();
    m_roundScored = m_roundScoreRefusals = 0;
    m_roundScoreMs = 0;
    m_directionRejections = 0;
    m_referenceRejections = 0;
    takeDirection();
    if (m_calibration) // the new version's measure; the last one counts until it is ready
        m_calibration->start(m_round.version(), m_round.sharedParams(), m_round.momentum());
}

// The host's latest measure counts as a named key's one sample: in the
// open round's statistics once the measure of its version is ready, in the
// previous round's until then (norms shrink as training goes on: the
// older measure does not stay beside the newer).
void Submissions::addHostSample(diloco::NormGate::State& state) const
{
    for (auto* round : {&state.previousRound, &state.currentRound})
        std::erase_if(*round, [](const diloco::NormGate::Sample& s) { return s.who == kHostKey; });
    if (!m_hostMeasure)
        return;
    if (m_round.version() - m_hostMeasure->version > kHostMeasureAge) {
        if (m_hostMeasureAgedOut != m_hostMeasure->version)
            std::fprintf(stderr,
                "%s: the host's calibration task from version %lld is %lld versions old: the gate no longer counts "
                "it until the next one is done (the host trains it slower than the rounds close)\n",
                m_spec.name.c_str(), static_cast<long long>(m_hostMeasure->version),
                static_cast<long long>(m_round.version() - m_hostMeasure->version));
        m_hostMeasureAgedOut = m_hostMeasure->version;
        return;
    }
    (m_hostMeasure->version == m_round.version() ? state.currentRound : state.previousRound)
        .push_back({kHostKey, m_hostMeasure->norm, m_hostMeasure->cosine, KeyTrust::kMaxTrust});
}

void Submissions::restoreGate(std::vector<diloco::NormGate::Sample> previous)
{
    diloco::NormGate::State state{std::move(previous), {}};
    addHostSample(state);
    m_gate.restore(std::move(state));
}

void Submissions::takeCalibration(bool wait)
{
    if (!m_calibration)
        return;
    std::optional<HostCalibration::Measure> measure = m_calibration->take(wait);
    if (!measure)
        return;
    m_hostMeasure = measure;
    diloco::NormGate::State state = m_gate.state();
    addHostSample(state);
    m_gate.restore(std::move(state));
    const std::optional<double> reference = m_gate.reference();
    std::fprintf(stderr, "%s: the host's calibration task from version %lld: norm %s, cosine %s (gate reference %s)\n",
        m_spec.name.c_str(), static_cast<long long>(measure->version), number(measure->norm).c_str(),
        measure->cosine ? number(*measure->cosine).c_str() : "-", reference ? number(*reference).c_str() : "-");
}

// What an attack looks like from the host's side (called once the round
// closed: it is the version now): a closed round with
// refusals, or whose new keys' weight was capped, says so on stderr (the
// page shows each key's accepted and refused counts).
void Submissions::logClosedRound() const
{
    double established = 0, fresh = 0;
    std::size_t freshCount = 0;
    for (const KeyTrust::Contribution& c : roundContributions()) {
        (c.fresh ? fresh : established) += c.weight;
        freshCount += c.fresh ? 1 : 0;
    }
    const double scale = m_trust.freshScale(established, fresh);
    if (m_roundScored > 0) {
        const std::optional<double> honest = honestChange();
        std::fprintf(stderr,
            "%s: round %lld: %d submissions scored on held-out loss (%.0f ms each), %d refused "
            "(loss_out_of_bounds); honest median change %s\n",
            m_spec.name.c_str(), static_cast<long long>(m_round.version()), m_roundScored,
            m_roundScoreMs / m_roundScored, m_roundScoreRefusals, honest ? number(*honest).c_str() : "-");
    }
    if (m_refusals.empty() && scale >= 1.0)
        return;
    std::string refused;
    int total = 0;
    for (const auto& [code, count] : m_refusals) {
        refused += (refused.empty() ? "" : ", ") + code + " " + std::to_string(count);
        total += count;
    }
    std::fprintf(stderr,
        "%s: round %lld closed with %zu accepted (%zu from new keys, their weight x %s) and %d refused%s%s%s\n",
        m_spec.name.c_str(), static_cast<long long>(m_round.version()), m_roundAccepted.size(), freshCount,
        number(scale).c_str(), total, refused.empty() ? "" : " (", refused.c_str(), refused.empty() ? "" : ")");
}

// No honest update moves one weight further than the per-element ceiling,
// nor holds a large part of the reference norm in one element (an honest
// update spreads over thousands): a message with its mass on a few
// elements (all on wte[0], say) is refused whatever its norm.
// `scale`: as the norm's, sqrt(task tokens / tokens) for a dense task cut
// short by a wrap-up (its elements moved less, as its norm did; else a cut
// task could carry its mass on one element), 1 for sparse.
std::optional<Error> Submissions::checkElements(const diloco::PayloadStats& stats, double scale) const
{
    if (m_elementCeiling > 0 && stats.maxAbs > m_elementCeiling)
        return Error::make(net::errc::kNormOutOfBounds,
            "element_too_large: an element of magnitude " + number(stats.maxAbs) + " exceeds the per-element ceiling "
                + number(m_elementCeiling));
    const std::optional<double> reference = m_gate.reference();
    if (reference && stats.maxAbs * scale > kMaxElementShare * *reference)
        return Error::make(net::errc::kNormOutOfBounds,
            "element_too_large: an element of magnitude " + number(stats.maxAbs)
                + (scale != 1.0 ? " (" + number(stats.maxAbs * scale) + " scaled to a whole task)" : std::string())
                + " exceeds " + number(kMaxElementShare) + " x the reference norm " + number(*reference));
    return std::nullopt;
}

// A payload accepted before (from any key, this key included), or a
// near-copy of one, earns nothing a second time.
std::optional<Error> Submissions::checkCopy(const std::string& sha, const PayloadSketch& sketch) const
{
    const core::SlowPart part("the copy check");
    for (const AcceptedSubmission& a : m_round.accepted())
        if (a.record.payloadSha256 == sha)
            return Error::make(net::errc::kDuplicatePayload,
                "this payload was accepted in this round already (task " + std::to_string(a.record.taskId) + ")");
    for (const Accepting& a : m_accepting) // accepted, not yet durable
        if (a.accepted.record.payloadSha256 == sha || a.sketch.cosine(sketch) >= PayloadSketch::kNearCopyCosine)
            return Error::make(net::errc::kDuplicatePayload,
                "this payload is (nearly) one accepted in this round already (task "
                    + std::to_string(a.accepted.record.taskId) + ")");
    if (m_previousShas.contains(sha))
        return Error::make(net::errc::kDuplicatePayload, "this payload was accepted in the previous round");
    for (const auto* round : {&m_roundSketches, &m_previousSketches})
        for (const PayloadSketch& other : *round)
            if (const double c = sketch.cosine(other); c >= PayloadSketch::kNearCopyCosine)
                return Error::make(net::errc::kDuplicatePayload,
                    "this payload is a near-copy (cosine " + number(c) + ") of one accepted in "
                        + (round == &m_roundSketches ? "this round" : "the previous round"));
    return std::nullopt;
}

// int8 and the other dense codecs: an accepted norm above kClipFactor x the
// reference counts as if scaled down to it (its weight, since the sum is
// linear). A sparse round scales every message to one norm instead.
double Submissions::clipOf(double gateNorm) const
{
    const std::optional<double> reference = m_gate.reference();
    if (m_sparse || !reference || !(gateNorm > kClipFactor * *reference))
        return 1.0;
    return kClipFactor * *reference / gateNorm;
}

// A sparse round's norm M for the established keys' messages: each key's
// median norm in the round, the trust-weighted median over keys (the
// smallest with at least half the weight at or below it). The messages'
// plain median let keys with some trust and large messages (within 4 x the
// reference) set the size of every round's step (issue 42: +9.7% on the
// attack bench).
std::optional<double> Submissions::sparseNorm() const
{
    if (!m_defences)
        return std::nullopt;
    std::map<std::string, std::vector<double>> byKey;
    for (const AcceptedSubmission& a : m_round.accepted())
        if (!a.fresh)
            byKey[a.record.publicKey].push_back(a.gate.norm);
    std::vector<std::pair<double, double>> perKey; // (median, trust)
    double total = 0;
    for (auto& [key, norms] : byKey) {
        const double weight = m_trust.trust(key);
        if (weight <= 0)
            continue;
        std::sort(norms.begin(), norms.end());
        const std::size_t mid = norms.size() / 2;
        perKey.emplace_back(norms.size() % 2 ? norms[mid] : (norms[mid - 1] + norms[mid]) / 2.0, weight);
        total += weight;
    }
    if (perKey.empty())
        return std::nullopt;
    std::sort(perKey.begin(), perKey.end());
    double below = 0;
    for (const auto& [norm, weight] : perKey) {
        below += weight;
        if (below >= total / 2.0)
            return norm;
    }
    return perKey.back().first;
}

void Submissions::accepted(const AcceptedSubmission& a, PayloadSketch sketch)
{
    m_roundSketches.push_back(std::move(sketch));
    const double trust = m_trust.trust(a.record.publicKey);
    if (trust > 0 && m_defences) // keys without history never set the statistics
        m_gate.accept(a.gate.norm, a.gate.cosine, a.record.publicKey, trust);
    m_roundAccepted.push_back(a);
    m_referenceRejections = 0;
}

// The sketch of an accepted payload on disk (empty if it cannot be read:
// the copy check then misses it, nothing else).
PayloadSketch Submissions::sketchOf(const std::filesystem::path& payload) const
{
    if (!m_sparse) {
        auto sketch = PayloadSketch::ofDense(m_codec, payload, m_sketchPositions);
        return sketch ? std::move(*sketch) : PayloadSketch();
    }
    auto bytes = core::readFile(payload);
    diloco::SparseEntries entries;
    if (!bytes || !diloco::inspectSparse(*m_sparse, *bytes, nullptr, &entries))
        return PayloadSketch();
    return PayloadSketch::ofSparse(entries);
}

} // namespace crowdtrain::coordinator
