#include "net/coordinator/key_trust.h"

#include "net/wire/error_codes.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

namespace crowdtrain::coordinator {

KeyTrust::KeyTrust(std::vector<std::string> namedKeys, double newKeyShare)
    : m_named(namedKeys.begin(), namedKeys.end())
    , m_newKeyShare(newKeyShare)
{ }

double KeyTrust::trust(const std::string& key) const
{
    if (m_named.contains(key))
        return kMaxTrust;
    auto it = m_trust.find(key);
    return it == m_trust.end() ? 0.0 : it->second;
}

bool KeyTrust::established(const std::string& key) const
{
    if (m_named.contains(key))
        return true;
    const double t = trust(key);
    return t > 0 && t >= std::min(kEstablishedTrust, 0.5 * m_mean);
}

void KeyTrust::updateMean()
{
    double sum = 0;
    for (const auto& [key, trust] : m_trust)
        sum += trust;
    m_mean = m_trust.empty() ? 0.0 : sum / double(m_trust.size());
}

double KeyTrust::freshScale(double established, double fresh) const
{
    if (established <= 0 || fresh <= 0 || m_newKeyShare >= 1)
        return 1.0;
    // lambda * fresh <= s / (1 - s) * established
    const double most = m_newKeyShare / (1.0 - m_newKeyShare) * established;
    return std::min(1.0, most / fresh);
}

void KeyTrust::penalize(const std::string& key)
{
    auto it = m_trust.find(key);
    if (it == m_trust.end())
        return;
    it->second *= 0.5;
    updateMean();
}

KeyTrust KeyTrust::afterRound(const std::vector<Contribution>& round) const
{
    double established = 0, fresh = 0;
    for (const Contribution& c : round)
        (c.fresh ? fresh : established) += c.weight;
    const double scale = freshScale(established, fresh);
    const double total = established + scale * fresh;
    KeyTrust next = *this;
    for (auto& [key, trust] : next.m_trust)
        trust *= kDecay;
    if (total > 0)
        for (const Contribution& c : round) {
            double& trust = next.m_trust[c.key];
            trust = std::min(kMaxTrust, trust + c.credit * (c.fresh ? scale : 1.0) * c.weight / total);
        }
    // Keys whose trust decayed to nothing are forgotten; past kMaxKeys, the
    // least trusted go first.
    std::erase_if(next.m_trust, [](const auto& entry) { return entry.second < 1e-6; });
    if (next.m_trust.size() > kMaxKeys) {
        std::vector<std::pair<double, std::string>> order;
        for (const auto& [key, trust] : next.m_trust)
            order.emplace_back(trust, key);
        std::sort(order.begin(), order.end());
        for (std::size_t i = 0; i + kMaxKeys < order.size(); ++i)
            next.m_trust.erase(order[i].second);
    }
    next.updateMean();
    return next;
}

nlohmann::json KeyTrust::toJson() const
{
    nlohmann::json json = nlohmann::json::object();
    for (const auto& [key, trust] : m_trust)
        json[key] = trust;
    return json;
}

Status KeyTrust::fromJson(const nlohmann::json& json)
{
    if (!json.is_object() || json.size() > kMaxKeys)
        return Error::make(net::errc::kStateCorrupt,
            "the state file's key trust is not an object of at most " + std::to_string(kMaxKeys) + " keys");
    std::map<std::string, double> trust;
    for (const auto& [key, value] : json.items()) {
        if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() < 0
            || value.get<double>() > kMaxTrust * (1 + 1e-9))
            return Error::make(net::errc::kStateCorrupt, "the state file's trust of a key is " + value.dump());
        trust[key] = value.get<double>();
    }
    m_trust = std::move(trust);
    updateMean();
    return Status::success();
}

} // namespace crowdtrain::coordinator
