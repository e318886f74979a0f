#include "net/daemon/hub_queries.h"

#include "net/control/control_names.h"
#include "net/daemon/demo_hub.h"

namespace crowdtrain::daemon {
namespace {

using control::Value;

Value projectValue(const net::ProjectInfo& p)
{
    Value model = Value::map();
    model.set("n_layer", p.model.nLayer).set("n_head", p.model.nHead).set("n_embd", p.model.nEmbd);
    model.set("block_size", p.model.blockSize).set("vocab_size", p.model.vocabSize);
    Value v = Value::map();
    v.set("name", p.name).set("description", p.description).set("model", std::move(model));
    v.set("parameters", p.parameters).set("round", p.round).set("version", p.version);
    v.set("tokens_trained", p.tokensTrained).set("token_goal", p.tokenGoal);
    v.set("volunteers_online", p.volunteersOnline);
    v.set("val_loss", p.valLoss ? Value(*p.valLoss) : Value());
    v.set("newest_checkpoint", p.newestCheckpoint ? Value(*p.newestCheckpoint) : Value());
    v.set("license", p.license).set("checkpoint_access", p.checkpointAccess);
    return v;
}

Value contributorValue(const net::ContributorRow& row)
{
    Value v = Value::map();
    v.set("display_name", row.displayName).set("public_key", row.publicKey).set("tokens", row.tokens);
    v.set("rounds_accepted", row.roundsAccepted).set("rounds_rejected", row.roundsRejected);
    v.set("gpu_hours", row.computeSeconds / 3600.0);
    return v;
}

} // namespace

Value catalogValue(const HubDirectory& hubs, const std::string& joinedHub, const std::string& joinedProject)
{
    Value list = Value::array();
    bool demoListed = false;
    for (const HubEntry& entry : hubs.entries()) {
        Value h = Value::map();
        const bool demo = entry.label == kDemoLabel;
        demoListed = demoListed || demo;
        h.set("link", demo ? std::string(kDemoLabel) : entry.link).set("label", entry.label);
        h.set("reachable", entry.error.empty());
        h.set("last_seen_ms", entry.lastSeenMs ? Value(*entry.lastSeenMs) : Value());
        h.set("error", entry.error);
        Value projects = Value::array();
        for (const net::ProjectInfo& p : entry.projects)
            projects.push(projectValue(p));
        h.set("projects", std::move(projects));
        list.push(std::move(h));
    }
    if (!demoListed) {
        // The built-in demo is always there; its coordinator starts when joined.
        Value model = Value::map();
        model.set("n_layer", 2).set("n_head", 2).set("n_embd", 64).set("block_size", 64);
        Value p = Value::map();
        p.set("name", kDemoProject).set("model", std::move(model));
        p.set("description",
            "A character-level GPT that learns to write fortune cookies. Runs on this computer only; starts "
            "when you join.");
        Value projects = Value::array();
        projects.push(std::move(p));
        Value h = Value::map();
        h.set("link", kDemoLabel).set("label", kDemoLabel).set("reachable", true).set("last_seen_ms", Value());
        h.set("error", "").set("projects", std::move(projects));
        list.push(std::move(h));
    }
    Value v = Value::map();
    v.set("hubs", std::move(list));
    v.set("joined_hub", joinedHub).set("joined_project", joinedProject);
    return v;
}

Result<Value> contributionsOf(const HubDirectory& hubs, const HubLink& hub, const std::string& project)
{
    auto mine = hubs.call<net::MyStatsReply>(hub, net::MyStatsRequest{project}, 5000);
    if (!mine)
        return Error::make(mine.error().code, "the hub did not answer: " + mine.error().message);
    auto board = hubs.call<net::LeaderboardReply>(hub, net::LeaderboardRequest{project, 50}, 5000);
    if (!board)
        return Error::make(board.error().code, "the hub did not answer: " + board.error().message);
    Value leaders = Value::array();
    for (const net::ContributorRow& row : board->rows)
        leaders.push(contributorValue(row));
    Value v = Value::map();
    v.set("project", project).set("mine", contributorValue(mine->stats)).set("rank", mine->rank);
    v.set("contributors", mine->contributors).set("project_tokens", mine->projectTokens);
    v.set("share", mine->projectTokens ? double(mine->stats.tokens) / double(mine->projectTokens) : 0.0);
    v.set("leaderboard", std::move(leaders));
    return v;
}

} // namespace crowdtrain::daemon
