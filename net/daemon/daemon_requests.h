#pragma once

// The daemon's control requests (docs/protocol.md 12.2), one handler per
// type in the request table: each checks every field on the control thread
// before anything happens (request_fields.h), then answers at once from
// memory or hands the work to a queue: "changes" (in order) for what
// changes something, "reads" for hub reads.

#include "net/daemon/checkpoints.h"
#include "net/daemon/history_cache.h"
#include "net/daemon/joined_project.h"
#include "net/daemon/live_settings.h"
#include "net/daemon/log_ring.h"
#include "net/daemon/request_table.h"

#include <functional>

namespace crowdtrain::daemon {

struct RequestParts {
    JoinedProject& joined;
    LiveSettings& settings;
    HubDirectory& hubs;
    Checkpoints& checkpoints;
    HistoryCache& history;
    LogRing& log;
    std::function<control::Value()> status;
};

// Adds a handler for every request type of control::request::kAll.
void addDaemonRequests(RequestTable& table, const RequestParts& parts);

} // namespace crowdtrain::daemon
