#pragma once

// What a volunteer agent does now (AgentSummary::phase), and its words on
// the wire: the status map's `phase` (docs/protocol.md 12.2). The agent sets
// it, the daemon words its state from it (net/daemon/status_words.cpp); the
// table below is the only place the words are written. Header-only.

#include "core/name_table.h"

#include <optional>
#include <string_view>

namespace crowdtrain::volunteer {

enum class AgentPhase {
    Starting,
    Connecting, // joining, before the first join succeeded
    Syncing, // fetching theta_v
    Waiting, // for the round or for work
    Training,
    Uploading,
    Offline, // reconnecting after a join
    Stopped,
};

inline constexpr core::NameTable<AgentPhase, 8> kAgentPhaseNames = {{
    {AgentPhase::Starting, "starting"},
    {AgentPhase::Connecting, "connecting"},
    {AgentPhase::Syncing, "syncing"},
    {AgentPhase::Waiting, "waiting"},
    {AgentPhase::Training, "training"},
    {AgentPhase::Uploading, "uploading"},
    {AgentPhase::Offline, "offline"},
    {AgentPhase::Stopped, "stopped"},
}};
static_assert(core::isOneToOne(kAgentPhaseNames));

constexpr std::string_view wireName(AgentPhase phase)
{
    return core::nameIn(kAgentPhaseNames, phase);
}
constexpr std::optional<AgentPhase> parseAgentPhase(std::string_view name)
{
    return core::parseIn(kAgentPhaseNames, name);
}

} // namespace crowdtrain::volunteer
