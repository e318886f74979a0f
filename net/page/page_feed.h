#pragma once

// What the public page shows of each project, as immutable snapshots. The
// coordinator's loop calls refresh() after each project's tick; at most once
// per refresh period (or at once when a round closes) it reads the project
// through its read-only queries (info, metrics, leaderboard, checkpoints:
// the ones the control requests use) and publishes a new snapshot. The HTTP
// threads only take the newest snapshot's shared pointer, so however many
// viewers there are, the loop does the same small work and never waits on
// them.
//
// refresh() on the loop's thread only; page() and pages() from any thread.

#include "net/wire/messages.h"

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace crowdtrain::coordinator {
class ProjectRuntime;
}

namespace crowdtrain::page {

// Bounds of one snapshot (and so of every response built from it).
inline constexpr std::size_t kMaxMetricRowsKept = 20000; // older halves are thinned beyond this
inline constexpr std::size_t kLeaderboardRows = 100;
inline constexpr std::size_t kMaxCheckpointsShown = 50; // the newest
inline constexpr std::size_t kMaxSampleBytes = 4096; // per prompt's text

struct Sample {
    std::string prompt;
    std::string text;
};

struct CheckpointView {
    net::CheckpointInfo info;
    std::filesystem::path dir; // where its files are (published folders are never modified)
    std::vector<Sample> samples;
};

struct ProjectPage {
    uint64_t generation = 0; // grows with every snapshot of this project
    int64_t updatedMs = 0;
    net::ProjectInfo info;
    std::string unprotected; // TrustSpec::unprotected(): empty when protected
    std::vector<net::MetricRow> metrics; // oldest first
    std::vector<net::ContributorRow> leaderboard; // most tokens first
    std::vector<net::DeviceShare> devices; // accepted tokens by device, most first
    std::vector<CheckpointView> checkpoints; // oldest first
};

class PageFeed {
public:
    // `stateDir`: the server's state folder (a project's checkpoints are
    // in STATE/NAME/checkpoints).
    explicit PageFeed(std::filesystem::path stateDir, int64_t refreshMs = 1000);

    void refresh(coordinator::ProjectRuntime& project, int64_t nowMs);

    std::shared_ptr<const ProjectPage> page(std::string_view name) const;
    std::vector<std::shared_ptr<const ProjectPage>> pages() const;

private:
    struct Tracker {
        int64_t lastMs = 0;
        uint64_t version = UINT64_MAX;
        uint64_t generation = 0;
        std::shared_ptr<const ProjectPage> current;
        std::map<uint64_t, std::vector<Sample>> samples; // by checkpoint round, read once
    };
    void rebuild(coordinator::ProjectRuntime& project, Tracker& tracker, int64_t nowMs);

    std::filesystem::path m_stateDir;
    int64_t m_refreshMs;
    std::map<std::string, Tracker, std::less<>> m_trackers; // the loop's thread only
    mutable std::mutex m_mutex;
    std::map<std::string, std::shared_ptr<const ProjectPage>, std::less<>> m_pages;
};

} // namespace crowdtrain::page
