// The daemon's read-only requests (docs/protocol.md 12.2): the catalog of
// followed hubs, the joined project's metric history, this machine's
// history, contributions and the log. Split from daemon.cpp, which keeps
// the state, the poller and the requests that change things.
#include "net/daemon/daemon.h"

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

Result<Value> Daemon::catalog(bool refresh)
{
    if (refresh)
        m_hubs->refresh(2000);
    Value hubs = Value::array();
    bool demoListed = false;
    for (const HubEntry& entry : m_hubs->entries()) {
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
        hubs.push(std::move(h));
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
        hubs.push(std::move(h));
    }
    Value v = Value::map();
    v.set("hubs", std::move(hubs));
    std::lock_guard lock(m_mutex);
    v.set("joined_hub", m_joinedHub).set("joined_project", m_joinedProject);
    return v;
}

Result<Value> Daemon::metrics(uint64_t since) const
{
    std::lock_guard lock(m_mutex);
    Value rows = Value::array();
    for (const Value& row : m_metricRows)
        if (row["round"].toUInt() >= since)
            rows.push(row);
    Value v = Value::map();
    v.set("project", m_joinedProject).set("rows", std::move(rows));
    return v;
}

Result<Value> Daemon::machineHistory() const
{
    std::lock_guard lock(m_mutex);
    Value rows = Value::array();
    for (const Value& row : m_machineRows)
        rows.push(row);
    Value v = Value::map();
    v.set("rows", std::move(rows));
    return v;
}

Result<Value> Daemon::contributions()
{
    std::optional<HubLink> hub;
    std::string project;
    {
        std::lock_guard lock(m_mutex);
        project = m_joinedProject;
        if (m_runner)
            hub = m_runner->target().hub;
    }
    if (!hub)
        return Error::make(control::errc::kNotJoined, "join a project to see contributions");
    auto mine = m_hubs->call<net::MyStatsReply>(*hub, net::MyStatsRequest{project}, 5000);
    if (!mine)
        return Error::make(mine.error().code, "the hub did not answer: " + mine.error().message);
    auto board = m_hubs->call<net::LeaderboardReply>(*hub, net::LeaderboardRequest{project, 50}, 5000);
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

Result<Value> Daemon::logLines() const
{
    std::lock_guard lock(m_logMutex);
    Value lines = Value::array();
    for (const std::string& line : m_logLines)
        lines.push(line);
    Value v = Value::map();
    v.set("lines", std::move(lines));
    return v;
}

} // namespace crowdtrain::daemon
