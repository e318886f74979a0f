#pragma once

// The control API's vocabulary (docs/protocol.md, section 12), spelled once:
// request and event types, the daemon's states, the limit codes, download
// states and error codes. The daemon, the command-line client and the app
// use these names; none of them writes the strings again. A name is added
// here, never renamed (the wire keeps its words).
//
// States, limits and download states are enums with one table each
// (wireName/parse* below); request and event types are constants, because
// every caller sends or matches them as text. Header-only (core/name_table.h
// and net/wire/error_codes.h, both header-only): net/limits includes it for
// the limit codes.

#include "core/name_table.h"
#include "net/wire/error_codes.h" // the codes the daemon shares with the hub

#include <array>
#include <optional>
#include <string_view>
#include <utility>

namespace crowdtrain::control {

// The built-in demo hub's name in `hub` and `link` fields (section 12.2),
// and its project's name.
inline constexpr std::string_view kDemoHub = "demo";
inline constexpr std::string_view kDemoProject = "demo-fortunes";

// Request types (section 12.2).
namespace request {
inline constexpr std::string_view kStatus = "status";
inline constexpr std::string_view kSettingsGet = "settings_get";
inline constexpr std::string_view kSettingsSet = "settings_set";
inline constexpr std::string_view kFollow = "follow";
inline constexpr std::string_view kUnfollow = "unfollow";
inline constexpr std::string_view kCatalog = "catalog";
inline constexpr std::string_view kJoin = "join";
inline constexpr std::string_view kLeave = "leave";
inline constexpr std::string_view kPause = "pause";
inline constexpr std::string_view kResume = "resume";
inline constexpr std::string_view kSnooze = "snooze";
inline constexpr std::string_view kMetrics = "metrics";
inline constexpr std::string_view kMachineHistory = "machine_history";
inline constexpr std::string_view kContributions = "contributions";
inline constexpr std::string_view kLog = "log";
inline constexpr std::string_view kCheckpoints = "checkpoints";
inline constexpr std::string_view kDownload = "download";
inline constexpr std::string_view kDownloadPause = "download_pause";
inline constexpr std::string_view kDownloadResume = "download_resume";
inline constexpr std::string_view kDownloadCancel = "download_cancel";
inline constexpr std::string_view kCheckpointDelete = "checkpoint_delete";
inline constexpr std::string_view kGenerate = "generate";

inline constexpr std::array kAll = {kStatus, kSettingsGet, kSettingsSet, kFollow, kUnfollow, kCatalog, kJoin, kLeave,
    kPause, kResume, kSnooze, kMetrics, kMachineHistory, kContributions, kLog, kCheckpoints, kDownload, kDownloadPause,
    kDownloadResume, kDownloadCancel, kCheckpointDelete, kGenerate};
} // namespace request

// Event topics (section 12.4).
namespace event {
inline constexpr std::string_view kState = "state";
inline constexpr std::string_view kProgress = "progress";
inline constexpr std::string_view kLog = "log";
inline constexpr std::string_view kMetrics = "metrics";
inline constexpr std::string_view kCheckpointPublished = "checkpoint_published";
inline constexpr std::string_view kDownload = "download";
inline constexpr std::string_view kGenerated = "generated";
inline constexpr std::string_view kSamples = "samples";

inline constexpr std::array kAll
    = {kState, kProgress, kLog, kMetrics, kCheckpointPublished, kDownload, kGenerated, kSamples};
} // namespace event

// Error codes the daemon sends besides the envelope's (control_protocol.h)
// and the hub's, which pass through (net/wire/error_codes.h).
namespace errc {
inline constexpr std::string_view kUnknownType = net::errc::kUnknownType; // no such request
inline constexpr std::string_view kBadRequest = "bad_request"; // a field missing, mistyped or out of range
inline constexpr std::string_view kBadHubLink = "bad_hub_link";
inline constexpr std::string_view kBadValue = "bad_value"; // a setting's rule, an empty prompt
inline constexpr std::string_view kUnknownSetting = "unknown_setting";
inline constexpr std::string_view kNotFound = net::errc::kNotFound;
inline constexpr std::string_view kNotJoined = net::errc::kNotJoined;
inline constexpr std::string_view kNotDownloaded = "not_downloaded";
inline constexpr std::string_view kNoDemoCorpus = "no_demo_corpus";
inline constexpr std::string_view kDemoFailed = "demo_failed";
inline constexpr std::string_view kAlreadyRunning = "already_running"; // local: another daemon holds the lock
inline constexpr std::string_view kStopping = "stopping"; // local: the daemon stops
} // namespace errc

using core::nameIn;
using core::NameTable;
using core::parseIn;

// The status map's `state` (section 12.2, "States and their reasons").
enum class DaemonState { Idle, Paused, Starting, Connecting, Training, Waiting, Syncing, Offline, Stopped };

inline constexpr NameTable<DaemonState, 9> kDaemonStateNames = {{
    {DaemonState::Idle, "idle"},
    {DaemonState::Paused, "paused"},
    {DaemonState::Starting, "starting"},
    {DaemonState::Connecting, "connecting"},
    {DaemonState::Training, "training"},
    {DaemonState::Waiting, "waiting for the round"},
    {DaemonState::Syncing, "downloading the model"},
    {DaemonState::Offline, "offline"},
    {DaemonState::Stopped, "stopped"},
}};
static_assert(core::isOneToOne(kDaemonStateNames));

constexpr std::string_view wireName(DaemonState s)
{
    return nameIn(kDaemonStateNames, s);
}
constexpr std::optional<DaemonState> parseDaemonState(std::string_view name)
{
    return parseIn(kDaemonStateNames, name);
}

// The status map's `limit_code`: which rule of the limits acts now (the
// words are in `limit`). None while nothing limits training.
enum class LimitCode {
    None,
    Schedule,
    Battery,
    Program,
    Temperature,
    Cooling,
    Power,
    GpuBusy,
    DataCap,
    InUse,
    BusyShare
};

inline constexpr NameTable<LimitCode, 11> kLimitCodeNames = {{
    {LimitCode::None, ""}, {LimitCode::Schedule, "schedule"}, {LimitCode::Battery, "battery"},
    {LimitCode::Program, "program"}, {LimitCode::Temperature, "temperature"}, // above the temperature limit
    {LimitCode::Cooling, "cooling"}, // under it again, within the minimum pause
    {LimitCode::Power, "power"}, {LimitCode::GpuBusy, "gpu_busy"}, {LimitCode::DataCap, "data_cap"},
    {LimitCode::InUse, "in_use"}, // paused while the computer is in use
    {LimitCode::BusyShare, "busy_share"}, // training, held to a share under 100%
}};
static_assert(core::isOneToOne(kLimitCodeNames));

constexpr std::string_view wireName(LimitCode c)
{
    return nameIn(kLimitCodeNames, c);
}
constexpr std::optional<LimitCode> parseLimitCode(std::string_view name)
{
    return parseIn(kLimitCodeNames, name);
}

// A checkpoint's `state` in `checkpoints` replies and `download` events.
// Cancelling: a cancel arrived while the files were being fetched (until
// the fetch stops); Cancelled: only in a download's last `download` event.
enum class DownloadState { Remote, Queued, Downloading, Paused, Waiting, Failed, Ready, Cancelling, Cancelled };

inline constexpr NameTable<DownloadState, 9> kDownloadStateNames = {{
    {DownloadState::Remote, "remote"},
    {DownloadState::Queued, "queued"},
    {DownloadState::Downloading, "downloading"},
    {DownloadState::Paused, "paused"},
    {DownloadState::Waiting, "waiting"},
    {DownloadState::Failed, "failed"},
    {DownloadState::Ready, "ready"},
    {DownloadState::Cancelling, "cancelling"},
    {DownloadState::Cancelled, "cancelled"},
}};
static_assert(core::isOneToOne(kDownloadStateNames));

constexpr std::string_view wireName(DownloadState s)
{
    return nameIn(kDownloadStateNames, s);
}
constexpr std::optional<DownloadState> parseDownloadState(std::string_view name)
{
    return parseIn(kDownloadStateNames, name);
}

} // namespace crowdtrain::control
