#pragma once

// All messages of protocol version 1 (docs/protocol.md is the contract).
// Encode with encodeRequest/encodeReply/encodeEvent, decode with
// decodeRequest/decodeReply/decodeEnvelope + decodeBody (envelope.h).

#include "net/wire/envelope.h"
#include "net/wire/events.h"
#include "net/wire/limits.h"
#include "net/wire/messages_common.h"
#include "net/wire/messages_resource.h"
#include "net/wire/messages_session.h"
#include "net/wire/messages_stats.h"
#include "net/wire/messages_submit.h"

#include <array>
#include <string_view>

namespace crowdtrain::net {

// A list of message structs, and the set of their kType.
template <typename... M> struct MessageList {
    static constexpr std::array<std::string_view, sizeof...(M)> kTypes = {M::kType...};
    static constexpr bool contains(std::string_view type) { return ((type == M::kType) || ...); }
};

// The requests of version 1 (a reply shares its request's kType), and the
// events: the one place that says which types exist (isRequestType,
// isEventType; tst_protocol checks every message against them).
using RequestMessages = MessageList<ListProjectsRequest, JoinRequest, HeartbeatRequest, LeaveRequest, GetTaskRequest,
    UploadChunkRequest, SubmitRequest, GetUpdateRequest, DescribeRequest, FetchRequest, ListCheckpointsRequest,
    MetricsRequest, LeaderboardRequest, MyStatsRequest, SwarmPeersRequest>;
using EventMessages = MessageList<RoundClosedEvent, CheckpointPublishedEvent, RoundWrapUpEvent, VersionPublishedEvent>;

} // namespace crowdtrain::net
