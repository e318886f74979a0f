#pragma once

// The public page's JSON API (docs/architecture.md, "The public project
// page"), rendered from a snapshot. Every string goes through nlohmann's
// encoder (invalid UTF-8 replaced), and the page's script only ever puts
// them in the DOM as text. Pure functions; thread-safe.
//
//   GET /api/projects                     [{"name", "description", "url"}, ...]
//   GET /api/projects/NAME                the summary: progress, leaderboard, checkpoints, terms, hub link
//   GET /api/projects/NAME/metrics?since=R   {"rows": [[round, tokens, train_loss, val_loss,
//                                         volunteers, time_ms], ...], "more": bool}: rounds >= R,
//                                         at most kMetricRowsPerReply; losses null when unknown

#include "net/page/page_feed.h"

#include <string>

namespace crowdtrain::page {

inline constexpr std::size_t kMetricRowsPerReply = 2000;

// What the page says about joining, beside the hub link.
std::string howToJoin(const std::string& projectName);

// The download path of a checkpoint file, or "" when the project's
// checkpoint_access keeps its files from the public.
std::string downloadPath(const ProjectPage& page, uint64_t round, const std::string& file);

std::string projectListJson(const std::vector<std::shared_ptr<const ProjectPage>>& pages);
std::string projectJson(const ProjectPage& page, const std::string& hubLink);
std::string metricsJson(const ProjectPage& page, uint64_t sinceRound);

} // namespace crowdtrain::page
