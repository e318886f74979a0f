#pragma once

// Replies made of what the hubs say (docs/protocol.md 12.2): the catalog of
// followed hubs (cached, the demo hub always listed) and the joined
// project's contributions (asked of its hub). Thread-safe (HubDirectory is).

#include "net/control/value.h"
#include "net/daemon/hub_directory.h"

namespace crowdtrain::daemon {

// {hubs, joined_hub, joined_project}
control::Value catalogValue(const HubDirectory& hubs, const std::string& joinedHub, const std::string& joinedProject);
// {project, mine, rank, contributors, project_tokens, share, leaderboard}
Result<control::Value> contributionsOf(const HubDirectory& hubs, const HubLink& hub, const std::string& project);

} // namespace crowdtrain::daemon
