#include "net/page/page_json.h"

#include <nlohmann/json.hpp>

#include <cmath>

namespace crowdtrain::page {
namespace {

using json = nlohmann::json;

json number(const std::optional<double>& value)
{
    return value && std::isfinite(*value) ? json(*value) : json(nullptr);
}

std::string dump(const json& value)
{
    // Replaces invalid UTF-8 (a hostile name, a sample cut mid-character)
    // instead of throwing.
    return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

} // namespace

std::string howToJoin(const std::string& projectName)
{
    return "Install Crowdtrain, paste the hub link in its Projects page (or run: crowdtrain-worker join LINK "
        + projectName + "), and press Join.";
}

std::string downloadPath(const ProjectPage& page, uint64_t round, const std::string& file)
{
    if (page.info.checkpointAccess != "everyone")
        return {};
    return "/projects/" + page.info.name + "/checkpoints/round-" + std::to_string(round) + "/" + file;
}

std::string projectListJson(const std::vector<std::shared_ptr<const ProjectPage>>& pages)
{
    json list = json::array();
    for (const auto& page : pages)
        list.push_back({{"name", page->info.name}, {"description", page->info.description},
            {"url", "/projects/" + page->info.name}});
    return dump(list);
}

namespace {

json deviceShares(const std::vector<net::DeviceShare>& shares)
{
    json out = json::array();
    for (const net::DeviceShare& d : shares)
        out.push_back({{"device", d.device}, {"volunteers", d.volunteers}, {"tokens", d.tokens}});
    return out;
}

} // namespace

std::string projectJson(const ProjectPage& page, const std::string& hubLink)
{
    const net::ProjectInfo& i = page.info;
    json leaderboard = json::array();
    for (const net::ContributorRow& row : page.leaderboard)
        leaderboard.push_back({{"display_name", row.displayName}, {"device", row.device}, {"tokens", row.tokens},
            {"compute_hours", row.computeSeconds / 3600.0}, {"accepted", row.roundsAccepted},
            {"rejected", row.roundsRejected}});
    const json devices = deviceShares(page.devices);
    json checkpoints = json::array();
    for (auto it = page.checkpoints.rbegin(); it != page.checkpoints.rend(); ++it) {
        json files = json::array();
        for (const net::FileInfo& f : it->info.files) {
            const std::string path = downloadPath(page, it->info.round, f.name);
            files.push_back({{"name", f.name}, {"bytes", f.bytes}, {"sha256", f.sha256},
                {"url", path.empty() ? json(nullptr) : json(path)}});
        }
        json samples = json::array();
        for (const Sample& s : it->samples)
            samples.push_back({{"prompt", s.prompt}, {"text", s.text}});
        checkpoints.push_back({{"round", it->info.round}, {"tokens", it->info.tokens},
            {"val_loss", number(it->info.valLoss)}, {"created_ms", it->info.createdMs}, {"files", files},
            {"samples", samples}, {"devices", deviceShares(it->info.devices)}});
    }
    const json body = {{"name", i.name}, {"description", i.description},
        {"model",
            {{"n_layer", i.model.nLayer}, {"n_head", i.model.nHead}, {"n_embd", i.model.nEmbd},
                {"block_size", i.model.blockSize}, {"vocab_size", i.model.vocabSize}, {"parameters", i.parameters}}},
        {"round", i.round}, {"version", i.version}, {"tokens_trained", i.tokensTrained}, {"token_goal", i.tokenGoal},
        {"volunteers_online", i.volunteersOnline}, {"val_loss", number(i.valLoss)}, {"codec", i.codec},
        {"terms", {{"license", i.license}, {"checkpoint_access", i.checkpointAccess}, {"token_goal", i.tokenGoal}}},
        {"unprotected", page.unprotected.empty() ? json(nullptr) : json(page.unprotected)}, {"hub_link", hubLink},
        {"how_to_join", howToJoin(i.name)}, {"leaderboard", leaderboard}, {"devices", devices},
        {"checkpoints", checkpoints}, {"generation", page.generation}, {"updated_ms", page.updatedMs}};
    return dump(body);
}

std::string metricsJson(const ProjectPage& page, uint64_t sinceRound)
{
    json rows = json::array();
    bool more = false;
    for (const net::MetricRow& m : page.metrics) {
        if (m.round < sinceRound)
            continue;
        if (rows.size() >= kMetricRowsPerReply) {
            more = true;
            break;
        }
        rows.push_back(
            json::array({m.round, m.tokens, number(m.trainLoss), number(m.valLoss), m.volunteers, m.timeMs}));
    }
    return dump({{"rows", rows}, {"more", more}});
}

} // namespace crowdtrain::page
