#pragma once

// What a project knows of each volunteer key's past (docs/architecture.md
// "Trust and Sybils"): keys are free, so a key's say in the statistics the
// submission gate uses, and its weight in a round, come from the accepted
// work it did, never from the number of keys.
//
// A key's trust is a decayed sum of the shares of the closed rounds' weight
// its accepted submissions had: trust <- kDecay * trust + credit x share at
// each close (so it is at most 1 / (1 - kDecay) = kMaxTrust, and the trust
// of all keys together tends to kMaxTrust). With evaluated contributions
// (`trust.evaluate`), the credit is 1 / rate for work that was scored and
// passed and 0 for the rest: trust then grows from evaluated work only.
// Keys the host names in the spec
// (`trust.keys`) always have kMaxTrust. A key is *established* from
// kEstablishedTrust (or half the mean trust, if lower) on; the others are
// *new*: together they take at most
// `trust.new_key_share` of a round's weight when established keys have
// work in it, and they never enter the gate's statistics. Many new keys
// therefore share one bounded part of each round between them, and none of
// them earns much: n keys that split a share s keep about s * kMaxTrust / n
// each.
//
// Kept in the state file with the gate's record (toJson/fromJson); at most
// kMaxKeys keys (the least trusted are forgotten first). Not thread-safe.

#include "core/result.h"

#include <map>
#include <nlohmann/json_fwd.hpp>
#include <set>
#include <string>
#include <vector>

namespace crowdtrain::coordinator {

class KeyTrust {
public:
    static constexpr double kDecay = 0.95;
    static constexpr double kMaxTrust = 1.0 / (1.0 - kDecay);
    static constexpr double kEstablishedTrust = 0.5;
    static constexpr std::size_t kMaxKeys = 100000;

    KeyTrust() = default;
    KeyTrust(std::vector<std::string> namedKeys, double newKeyShare);

    double trust(const std::string& key) const;
    // Named, or trust at least min(kEstablishedTrust, half the mean trust of
    // the keys with some): in a swarm of hundreds each honest key's share is
    // small, and still far above what each of many fresh keys gets.
    bool established(const std::string& key) const;
    bool named(const std::string& key) const { return m_named.contains(key); }
    double newKeyShare() const { return m_newKeyShare; }

    // One accepted submission of a closed round: its key, its weight in the
    // round before the new keys' cap (tokens x clipping), whether its key
    // was new when it was accepted, and how much of its share of the round
    // its key earns as trust: 1; with evaluation at rate r (spec
    // trust.evaluate), 1 / r if it was scored and passed and 0 if it was not
    // scored, so that trust comes from evaluated work only and an honest
    // key earns on average what it would without evaluation. A key's trust
    // never exceeds kMaxTrust.
    struct Contribution {
        std::string key;
        double weight = 0;
        bool fresh = false;
        double credit = 1.0;
    };
    // The factor the new keys' weights are multiplied by in a round where
    // the established ones weigh `established` and the new ones `fresh`:
    // 1, or less so that the new keys hold at most newKeyShare() of it. A
    // round without established work is the new keys' alone.
    double freshScale(double established, double fresh) const;
    // A submission of this key was refused on its held-out score (it made
    // the loss worse than honest work does): its trust is halved (a named
    // key's stays).
    void penalize(const std::string& key);
    // The trust after a round with these contributions closed.
    KeyTrust afterRound(const std::vector<Contribution>& round) const;

    nlohmann::json toJson() const;
    Status fromJson(const nlohmann::json& json);
    std::size_t size() const { return m_trust.size(); }

private:
    std::set<std::string> m_named;
    double m_newKeyShare = 0.25;
    std::map<std::string, double> m_trust;
    double m_mean = 0; // over m_trust
    void updateMean();
};

} // namespace crowdtrain::coordinator
