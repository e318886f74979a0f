#include "net/daemon/daemon_state_file.h"

#include "core/file_io.h"
#include "net/control/control_names.h"
#include "net/daemon/hub_link.h"
#include "net/daemon/state_file.h"
#include "net/wire/text_checks.h"

#include <nlohmann/json.hpp>

namespace crowdtrain::daemon {

namespace {

using json = nlohmann::json;

// daemon.json as snapshot() writes it; "" when it is.
std::string stateProblem(const json& state)
{
    for (const std::string& why : {expectString(state, "joined_hub"), expectString(state, "joined_project"),
             expectBool(state, "paused"), expectInteger(state, "snooze_until_ms")})
        if (!why.empty())
            return why;
    if (!state.contains("hubs") || !state["hubs"].is_array())
        return "\"hubs\" is not a list";
    for (const json& link : state["hubs"])
        if (!link.is_string() || !parseHubLink(link.get<std::string>()))
            return "\"hubs\" holds something that is not a hub link";
    const std::string project = state["joined_project"].get<std::string>();
    const std::string hub = state["joined_hub"].get<std::string>();
    if (!project.empty() && !net::isProjectName(project))
        return "\"joined_project\" is not a project name";
    if (project.empty() != hub.empty() || (!hub.empty() && hub != control::kDemoHub && !parseHubLink(hub)))
        return "\"joined_hub\" is not \"demo\" or a hub link";
    return "";
}

} // namespace

DaemonStateFile::DaemonStateFile(std::filesystem::path file)
    : m_file(std::move(file))
{ }

std::optional<SavedState> DaemonStateFile::load(std::string& notice) const
{
    const auto state = readStateFile(m_file, 1 << 20, stateProblem, notice);
    if (!state)
        return std::nullopt;
    SavedState saved;
    for (const auto& link : (*state)["hubs"])
        saved.hubs.push_back(link.get<std::string>());
    saved.joinedHub = (*state)["joined_hub"].get<std::string>();
    saved.joinedProject = (*state)["joined_project"].get<std::string>();
    saved.paused = (*state)["paused"].get<bool>();
    saved.snoozeUntilMs = (*state)["snooze_until_ms"].get<int64_t>();
    return saved;
}

DaemonStateFile::Snapshot DaemonStateFile::snapshot(const SavedState& state)
{
    const json text = {{"version", 1}, {"hubs", state.hubs}, {"joined_hub", state.joinedHub},
        {"joined_project", state.joinedProject}, {"paused", state.paused}, {"snooze_until_ms", state.snoozeUntilMs}};
    return {++m_seq, text.dump(2) + "\n"};
}

Status DaemonStateFile::write(const Snapshot& snapshot)
{
    std::lock_guard lock(m_writeMutex);
    if (snapshot.seq <= m_writtenSeq)
        return Status::success(); // a newer state is on disk already
    m_writtenSeq = snapshot.seq;
    return core::writeFileAtomic(m_file, snapshot.text, 0600);
}

} // namespace crowdtrain::daemon
