#pragma once

// What a project's runtime (project_runtime.h) is told and tells: its
// options, a closed round's report for the host's log, and the events a tick
// publishes. Kept apart from project_runtime.h so that the server's front
// (coordinator_server.h, the page, crowdtrain-server's main) sees these
// without the runtime's collaborators and so without libtorch.

#include "net/transport/pirate.h"
#include "net/wire/events.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace crowdtrain::swarm {
class SwarmSession;
}

namespace crowdtrain::coordinator {

class ProjectRuntime;

// A closed round, for the host's log.
struct RoundReport {
    std::string project;
    int64_t round = 0;
    int64_t tokens = 0; // trained in the round
    int64_t totalTokens = 0;
    int64_t volunteers = 0; // whose submissions the round took
    std::optional<double> trainLoss;
    std::optional<double> valLoss;
    int64_t publishedMs = 0; // from the close's start to the new version served
    int64_t closeMs = 0; // from the close's start to its end (evaluation and checkpoint included)
    uint64_t bytesWritten = 0; // state, update and checkpoint files
    bool checkpoint = false;
};

struct RuntimeOptions {
    uint64_t heartbeatIntervalMs = net::kHeartbeatIntervalMs;
    uint64_t heartbeatLiveness = net::kHeartbeatLiveness;
    uint64_t retryAfterMs = 50; // told to volunteers that find no task
    uint64_t eventsPort = 0; // the PUB socket's TCP port, told to joiners (0: unknown)
    // The coordinator's BitTorrent session, seeding published checkpoints
    // (project_swarm.h); null: no swarm, downloads are chunked only.
    swarm::SwarmSession* swarm = nullptr;
    // Fault injection for tests: called with "tick" as each tick starts and
    // with "evaluate" on the evaluation thread before a closed round is
    // evaluated (`round`: the open or the evaluated round); what it throws
    // is that step's failure.
    // The close's points too: "close-begun" and "close-written" on the
    // worker, "close-published" on the loop after the commit.
    std::function<void(std::string_view where, int64_t round)> faultPoint;
    // Called on the loop once a round's close is over (its evaluation and
    // checkpoint included): the server's log line.
    std::function<void(const RoundReport&)> roundReport;
};

// What a round close or a checkpoint tells the PUB socket.
struct PublishedEvents {
    std::vector<net::EventFrames> frames;
};

} // namespace crowdtrain::coordinator
