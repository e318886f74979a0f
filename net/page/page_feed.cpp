#include "net/page/page_feed.h"

#include "net/coordinator/project_runtime.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <sstream>

namespace crowdtrain::page {
namespace {

// samples.json beside a checkpoint: {"round": R, ..., "samples": [{"prompt":
// ..., "text": ...}, ...]} (net/coordinator/evaluation.cpp); missing or
// unreadable: none.
std::vector<Sample> readSamples(const std::filesystem::path& dir)
{
    std::ifstream in(dir / "samples.json", std::ios::binary);
    if (!in)
        return {};
    std::stringstream text;
    text << in.rdbuf();
    const auto json = nlohmann::json::parse(text.str(), nullptr, false);
    std::vector<Sample> samples;
    if (!json.is_object() || !json.contains("samples") || !json["samples"].is_array())
        return samples;
    for (const auto& item : json["samples"]) {
        if (!item.is_object() || !item.contains("prompt") || !item.contains("text") || !item["prompt"].is_string()
            || !item["text"].is_string())
            continue;
        Sample s{item["prompt"].get<std::string>(), item["text"].get<std::string>()};
        if (s.text.size() > kMaxSampleBytes)
            s.text.resize(kMaxSampleBytes);
        samples.push_back(std::move(s));
        if (samples.size() >= coordinator::ProjectSpec::kMaxPrompts)
            break;
    }
    return samples;
}

// Keeps a long history's shape in bounded memory: every second row of the
// older half goes, the recent half stays whole.
void thin(std::vector<net::MetricRow>& rows)
{
    if (rows.size() <= kMaxMetricRowsKept)
        return;
    const std::size_t half = rows.size() / 2;
    std::vector<net::MetricRow> kept;
    kept.reserve(rows.size());
    for (std::size_t i = 0; i < half; i += 2)
        kept.push_back(rows[i]);
    kept.insert(kept.end(), rows.begin() + std::ptrdiff_t(half), rows.end());
    rows = std::move(kept);
}

} // namespace

PageFeed::PageFeed(std::filesystem::path stateDir, int64_t refreshMs)
    : m_stateDir(std::move(stateDir))
    , m_refreshMs(refreshMs)
{ }

void PageFeed::refresh(coordinator::ProjectRuntime& project, int64_t nowMs)
{
    Tracker& tracker = m_trackers[project.name()];
    const bool roundClosed = uint64_t(project.version()) != tracker.version;
    if (!roundClosed && tracker.current && nowMs - tracker.lastMs < m_refreshMs)
        return;
    rebuild(project, tracker, nowMs);
}

void PageFeed::rebuild(coordinator::ProjectRuntime& project, Tracker& tracker, int64_t nowMs)
{
    auto next = std::make_shared<ProjectPage>();
    next->generation = ++tracker.generation;
    next->updatedMs = nowMs;
    next->info = project.info();
    next->info.tokenizer.clear(); // resource names for the wire; the page has no use for them
    next->unprotected = project.unprotected();
    if (tracker.current)
        next->metrics = tracker.current->metrics;

    // Only what is new: rows from the newest round held on (its validation
    // loss may have come since), in replies of at most kMaxMetricRows.
    for (int page = 0; page < 8; ++page) {
        const uint64_t since = next->metrics.empty() ? 0 : next->metrics.back().round;
        auto reply = project.queries().metrics(net::MetricsRequest{project.name(), since, net::kMaxMetricRows});
        if (!reply)
            break;
        std::erase_if(next->metrics, [&](const net::MetricRow& row) { return row.round >= since; });
        next->metrics.insert(next->metrics.end(), reply->rows.begin(), reply->rows.end());
        if (reply->rows.size() < net::kMaxMetricRows || reply->rows.back().round == since)
            break;
    }
    thin(next->metrics);

    if (auto board = project.queries().leaderboard(net::LeaderboardRequest{project.name(), kLeaderboardRows}))
        next->leaderboard = std::move(board->rows);
    else if (tracker.current)
        next->leaderboard = tracker.current->leaderboard;
    if (auto devices = project.queries().deviceMix())
        next->devices = std::move(*devices);
    else if (tracker.current)
        next->devices = tracker.current->devices;

    if (auto list = project.downloads().listCheckpoints()) {
        const auto dir = m_stateDir / project.name() / "checkpoints";
        const std::size_t skip
            = list->checkpoints.size() > kMaxCheckpointsShown ? list->checkpoints.size() - kMaxCheckpointsShown : 0;
        std::map<uint64_t, std::vector<Sample>> samples;
        for (std::size_t i = skip; i < list->checkpoints.size(); ++i) {
            const uint64_t round = list->checkpoints[i].round;
            CheckpointView view{std::move(list->checkpoints[i]), dir / ("round-" + std::to_string(round)), {}};
            auto known = tracker.samples.find(view.info.round);
            samples[view.info.round]
                = known != tracker.samples.end() ? std::move(known->second) : readSamples(view.dir);
            view.samples = samples[view.info.round];
            next->checkpoints.push_back(std::move(view));
        }
        tracker.samples = std::move(samples); // removed checkpoints leave the cache
    } else if (tracker.current) {
        next->checkpoints = tracker.current->checkpoints;
    }

    tracker.version = uint64_t(project.version());
    tracker.lastMs = nowMs;
    tracker.current = next;
    std::lock_guard lock(m_mutex);
    m_pages[project.name()] = std::move(next);
}

std::shared_ptr<const ProjectPage> PageFeed::page(std::string_view name) const
{
    std::lock_guard lock(m_mutex);
    auto it = m_pages.find(name);
    return it == m_pages.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<const ProjectPage>> PageFeed::pages() const
{
    std::lock_guard lock(m_mutex);
    std::vector<std::shared_ptr<const ProjectPage>> all;
    for (const auto& [name, page] : m_pages)
        all.push_back(page);
    return all;
}

} // namespace crowdtrain::page
