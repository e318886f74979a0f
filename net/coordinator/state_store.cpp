#include "net/coordinator/state_store.h"
#include "net/wire/error_codes.h"

#include "net/transfer/sha256.h"

#include "core/file_io.h"
#include "engine/gpt_config.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <fstream>
#include <set>
#include <utility>

namespace crowdtrain::coordinator {

std::string ProjectStore::stateFileName(int64_t version)
{
    return "state/global-" + std::to_string(version) + ".bin";
}

std::string ProjectStore::updateFileName(int64_t version)
{
    return "state/update-" + std::to_string(version) + ".bin";
}

ProjectStore::ProjectStore(std::filesystem::path dir, Ledger ledger, uint64_t parameters, uint64_t tokensPerPiece,
    uint32_t piecesPerTask, uint64_t dataSeed, int64_t leaseMs)
    : m_dir(std::move(dir))
    , m_ledger(std::move(ledger))
    , m_parameters(parameters)
    , m_tokensPerPiece(tokensPerPiece)
    , m_piecesPerTask(piecesPerTask)
    , m_dataSeed(dataSeed)
    , m_leaseMs(leaseMs)
{ }

Result<ProjectStore> ProjectStore::open(const ProjectSpec& spec, const std::filesystem::path& stateDir)
{
    std::error_code ec;
    std::filesystem::create_directories(stateDir / "state", ec);
    if (ec)
        return Error::make(net::errc::kIoError, "cannot create " + (stateDir / "state").string() + ": " + ec.message());
    auto ledger = Ledger::open(stateDir / "ledger.sqlite");
    if (!ledger)
        return ledger.error();
    const uint64_t parameters = uint64_t(engine::parameterCount(spec.model));
    // A state folder belongs to one project and one model shape.
    const std::pair<std::string, std::string> identity[]
        = {{"project_name", spec.name}, {"parameter_count", std::to_string(parameters)}};
    for (const auto& [key, value] : identity) {
        auto stored = ledger->meta(key);
        if (!stored)
            return stored.error();
        if (*stored && **stored != value)
            return Error::make(net::errc::kStateMismatch,
                stateDir.string() + " belongs to " + key + " " + **stored + ", not " + value
                    + " (use another state folder for another project or model)");
        if (!*stored) {
            if (Status s = ledger->setMeta(key, value); !s)
                return s.error();
        }
    }
    auto last = ledger->lastRound();
    if (!last)
        return last.error();
    ProjectStore store(stateDir, std::move(*ledger), parameters, spec.tokensPerPiece(), spec.piecesPerTask(),
        spec.init.seed, spec.round.deadlineSeconds * 1000);
    store.m_lastRound = *last;
    if (Status s = store.removeUnreferencedFiles(&store.m_removedAtOpen, true); !s)
        return s.error();
    return store;
}

Result<std::vector<std::filesystem::path>> ProjectStore::unreferencedFiles(bool atOpen) const
{
    std::set<std::string> keep;
    if (m_lastRound) {
        keep.insert(std::filesystem::path(m_lastRound->stateFile).filename().string());
        if (!m_lastRound->updateFile.empty())
            keep.insert(std::filesystem::path(m_lastRound->updateFile).filename().string());
        keep.insert(thetaFileName(m_lastRound->version));
    }
    for (const int64_t held : m_heldThetas)
        keep.insert(thetaFileName(held));
    std::error_code ec;
    std::vector<std::filesystem::path> gone;
    for (const auto& entry : std::filesystem::directory_iterator(m_dir / "state", ec)) {
        const std::string name = entry.path().filename().string();
        const bool ours = name.ends_with(".bin") && (name.starts_with("global-") || name.starts_with("update-"));
        // theta and its torrent (project_swarm.h keeps it beside the file)
        const bool theta = name.starts_with("state-v");
        const bool torrent = name.starts_with(".state-v") && name.ends_with(".torrent");
        const bool temporary = name.starts_with(".") && name.find(".tmp-") != std::string::npos;
        if (((ours || theta) && !keep.contains(name)) || temporary
            || (torrent && !keep.contains(name.substr(1, name.size() - 1 - 8))))
            gone.push_back(entry.path());
    }
    if (ec)
        return Error::make(net::errc::kIoError, "cannot list " + (m_dir / "state").string() + ": " + ec.message());
    if (atOpen && std::filesystem::exists(m_dir / "swarm")) // format 1 kept a copy of theta there
        gone.push_back(m_dir / "swarm");
    return gone;
}

Status ProjectStore::removeFiles(const std::vector<std::filesystem::path>& files)
{
    std::error_code ec;
    std::set<std::filesystem::path> dirs;
    for (const std::filesystem::path& path : files) {
        std::filesystem::remove_all(path, ec);
        if (ec)
            return Error::make(net::errc::kIoError, "cannot remove " + path.string() + ": " + ec.message());
        dirs.insert(path.parent_path());
    }
    for (const std::filesystem::path& dir : dirs)
        if (Status s = core::syncFolder(dir); !s)
            return s;
    return Status::success();
}

Status ProjectStore::removeUnreferencedFiles(std::vector<std::filesystem::path>* removed, bool atOpen)
{
    auto gone = unreferencedFiles(atOpen);
    if (!gone)
        return gone.error();
    if (removed)
        *removed = *gone;
    return removeFiles(*gone);
}

std::vector<std::filesystem::path> ProjectStore::takeUnreferenced()
{
    return std::exchange(m_unreferenced, {});
}

void ProjectStore::releaseTheta(int64_t version)
{
    if (m_heldThetas.erase(version) == 0 || (m_lastRound && m_lastRound->version == version))
        return;
    const std::filesystem::path files[]
        = {thetaFile(version), m_dir / "state" / ("." + thetaFileName(version) + ".torrent")};
    if (m_deferPruning) { // removed with the next close's files, off the loop
        for (const std::filesystem::path& file : files)
            if (std::find(m_unreferenced.begin(), m_unreferenced.end(), file) == m_unreferenced.end())
                m_unreferenced.push_back(file);
        return;
    }
    std::error_code ec;
    for (const std::filesystem::path& file : files)
        std::filesystem::remove(file, ec);
}

Result<GlobalState> ProjectStore::loadLatest()
{
    return loadLast(true);
}

Result<GlobalState> ProjectStore::loadLatestOptimizer()
{
    return loadLast(false);
}

Result<GlobalState> ProjectStore::loadLast(bool withParams)
{
    if (!m_lastRound)
        return Error::make(net::errc::kNoState, m_dir.string() + " holds no committed round yet");
    auto state = readGlobalState(m_dir / m_lastRound->stateFile, m_parameters, withParams);
    if (!state)
        return state.error();
    if (state->version != m_lastRound->version)
        return Error::make(net::errc::kStateCorrupt,
            (m_dir / m_lastRound->stateFile).string() + " holds version " + std::to_string(state->version)
                + ", the ledger says " + std::to_string(m_lastRound->version));
    return state;
}

Status ProjectStore::checkNext(int64_t version, uint64_t parameters, bool withUpdate) const
{
    const int64_t nextVersion = m_lastRound ? m_lastRound->version + 1 : 0;
    if (version != nextVersion)
        return Error::make(net::errc::kBadCommit,
            "state version " + std::to_string(version) + " is not the next version " + std::to_string(nextVersion));
    if (parameters != m_parameters)
        return Error::make(net::errc::kBadCommit,
            "the state holds " + std::to_string(parameters) + " parameters, the model has "
                + std::to_string(m_parameters));
    if (nextVersion == 0 && withUpdate)
        return Error::make(net::errc::kBadCommit, "version 0 has no update");
    return Status::success();
}

Status ProjectStore::commit(const GlobalState& state, RoundCommit commit, std::string_view encodedUpdate)
{
    auto written = writeVersion(
        GlobalStateView{state.version, state.params, state.momentum, state.updateResidual, state.extra}, encodedUpdate);
    if (!written)
        return written.error();
    return commitWritten(std::move(commit), state.version, !encodedUpdate.empty());
}

Result<WrittenState> ProjectStore::writeVersion(const GlobalStateView& state, std::string_view encodedUpdate) const
{
    if (Status s = checkNext(state.version, state.params.size(), !encodedUpdate.empty()); !s)
        return s.error();
    auto written = writeGlobalState(m_dir / stateFileName(state.version), state);
    if (!written) {
        // theta may be in place without its state file (a disk that filled
        // up between the two): its space back now, not at the next open().
        removeUncommitted(state.version);
        return written.error();
    }
    if (!encodedUpdate.empty()) {
        if (Status s
            = writeUpdateFile(m_dir / updateFileName(state.version), state.version, m_parameters, encodedUpdate);
            !s) {
            removeUncommitted(state.version);
            return s.error();
        }
        std::error_code ec;
        const uint64_t bytes = std::filesystem::file_size(m_dir / updateFileName(state.version), ec);
        written->bytes += ec ? 0 : bytes;
    }
    return written;
}

void ProjectStore::removeUncommitted(int64_t version) const
{
    std::error_code ec;
    for (const std::filesystem::path& file :
        {m_dir / stateFileName(version), m_dir / updateFileName(version), thetaFile(version)})
        std::filesystem::remove(file, ec);
}

Status ProjectStore::commitWritten(RoundCommit commit, int64_t version, bool withUpdate)
{
    auto committed = commitRecord(m_ledger, std::move(commit), version, withUpdate);
    if (!committed)
        return committed.error();
    noteCommitted(std::move(*committed));
    return Status::success();
}

Result<RoundRecord> ProjectStore::commitRecord(
    Ledger& ledger, RoundCommit commit, int64_t version, bool withUpdate) const
{
    const int64_t nextRound = m_lastRound ? m_lastRound->round + 1 : 0;
    if (commit.record.round != nextRound)
        return Error::make(net::errc::kBadCommit,
            "round " + std::to_string(commit.record.round) + " is not the next round " + std::to_string(nextRound));
    if (Status s = checkNext(version, m_parameters, withUpdate); !s)
        return s.error();
    commit.record.version = version;
    commit.record.stateFile = stateFileName(version);
    commit.record.updateFile = withUpdate ? updateFileName(version) : std::string();
    for (ContributionRecord& c : commit.contributions)
        c.round = commit.record.round;
    if (Status s = ledger.commitRound(commit); !s) {
        // Not named by the ledger: orphans now, removed right away.
        removeUncommitted(version);
        return s.error();
    }
    auto last = ledger.lastRound();
    if (!last)
        return last.error();
    if (!*last || (*last)->round != commit.record.round)
        return Error::make(net::errc::kBadCommit, ledger.file().string() + " does not show the round just committed");
    return std::move(**last);
}

void ProjectStore::noteCommitted(RoundRecord record)
{
    m_lastRound = std::move(record);
    // The round is durable; failing to prune old files only costs disk.
    if (!m_deferPruning) {
        (void)removeUnreferencedFiles(nullptr, false);
    } else if (auto gone = unreferencedFiles(false)) {
        for (std::filesystem::path& path : *gone)
            if (std::find(m_unreferenced.begin(), m_unreferenced.end(), path) == m_unreferenced.end())
                m_unreferenced.push_back(std::move(path));
    }
}

Result<std::string> ProjectStore::readUpdate(int64_t version)
{
    if (!m_lastRound || version != m_lastRound->version || m_lastRound->updateFile.empty())
        return Error::make(net::errc::kNoUpdate, "the update to version " + std::to_string(version) + " is not kept");
    return readUpdateFile(m_dir / m_lastRound->updateFile, version, m_parameters);
}

Result<DataPlan> ProjectStore::restoreDataPlan(const engine::DataSet& data)
{
    auto plan = DataPlan::create(data, m_tokensPerPiece, m_dataSeed, m_leaseMs, m_piecesPerTask);
    if (!plan)
        return plan.error();
    auto progress = m_ledger.dataProgress();
    if (!progress)
        return progress.error();
    if (*progress) {
        if (Status s = plan->restore((*progress)->blob); !s)
            return Error::make(s.error().code, m_ledger.file().string() + ": " + s.error().message);
    }
    return plan;
}

} // namespace crowdtrain::coordinator
