#pragma once

// The project's state folder: the global model and outer-optimizer state of
// the last round, the update that produced the latest version, and the
// ledger.
//   STATE/ledger.sqlite
//   STATE/state/state-v<v>        theta_v: P f32, little-endian, nothing else. It is
//                                 the file served and seeded as "state-v<v>"
//                                 (downloads.h): the state is written once a round.
//   STATE/state/global-<v>.bin    outer momentum, update residual, theta_v's SHA-256
//   STATE/state/update-<v>.bin    the encoded update u with theta_v = theta_{v-1} + decode(u)
//
// global-<v>.bin, all little-endian (format 2):
//   "CTGLOBAL", u32 format version (2), u32 0, i64 version, u64 P, u64 extra bytes,
//   SHA-256 of state-v<v> (32 bytes), P f32 momentum, P f32 update residual,
//   extra bytes, SHA-256 of everything before it (32 bytes).
// Format 1 (read, never written) held P f32 params before the momentum and
// no theta hash.
// update-<v>.bin:
//   "CTUPDATE", u32 format version (1), u32 0, i64 version, u64 P, u64 payload bytes,
//   SHA-256 of the payload (32 bytes), payload (the codec's bytes, as published).
//
// Commit order: theta, the state file and the update file are written
// atomically (temporary name, fsync, rename, folder fsync), then ONE ledger
// transaction names them. A crash between the two leaves orphan files that
// open() deletes; the ledger's last round always names complete files. The
// writing (writeVersion) may run on another thread than the ledger's
// commit (commitWritten): it reads nothing the commit changes. Kept: the
// global and update files of the last round, the last theta, and older
// thetas while Downloads holds them (served to a slow joiner); open()
// removes the rest.
//
// A ProjectStore owns its ledger connection: move-only; its ledger is used
// from one thread.

#include "net/coordinator/data_plan.h"
#include "net/coordinator/ledger.h"
#include "net/coordinator/project_spec.h"

#include "core/result.h"
#include "engine/data_set.h"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace crowdtrain::coordinator {

struct GlobalState {
    int64_t version = 0; // outer steps applied
    std::vector<float> params; // theta_v, P elements (flat, engine order)
    std::vector<float> momentum; // outer Nesterov buffer; empty means zeros
    std::vector<float> updateResidual; // server-side error feedback; empty means zeros
    std::string extra; // the service's own bytes, kept verbatim (the coordinator: JSON {"accepted_norms": [...]})
    std::string paramsSha256; // of params (lowercase hex), filled in by readGlobalState
};

// What writeGlobalState writes, without owning it (a round close writes
// theta_{v+1} from the buffer the loop will serve).
struct GlobalStateView {
    int64_t version = 0;
    std::span<const float> params, momentum, updateResidual; // momentum, residual: empty means zeros
    std::string_view extra;
};

struct WrittenState {
    std::string paramsSha256; // of theta, lowercase hex
    uint64_t bytes = 0; // written: theta, state file and update file
};

// "state-v<version>": theta's file name beside the state file (and the
// resource it is served as).
std::string thetaFileName(int64_t version);

// Writes theta_v as `file`'s folder / thetaFileName(v), then `file`.
Result<WrittenState> writeGlobalState(const std::filesystem::path& file, const GlobalStateView& state);
Result<WrittenState> writeGlobalState(const std::filesystem::path& file, const GlobalState& state);
// Error "state_corrupt" naming the file when it (or its theta file) is
// truncated, damaged or not a state file; "state_mismatch" when it holds
// another P than expected.
// withParams false: theta is not read (params stay empty; its hash is filled in).
Result<GlobalState> readGlobalState(const std::filesystem::path& file,
    std::optional<uint64_t> expectedParameters = std::nullopt, bool withParams = true);

Status writeUpdateFile(
    const std::filesystem::path& file, int64_t version, uint64_t parameters, std::string_view payload);
Result<std::string> readUpdateFile(
    const std::filesystem::path& file, int64_t expectedVersion, uint64_t expectedParameters);

// SHA-256 of the parameters' fp32 little-endian bytes, lowercase hex: what
// volunteers check after applying an update.
std::string parametersSha256Hex(std::span<const float> params);

class ProjectStore {
public:
    // Creates the folder and ledger when missing, ties them to the spec's
    // name and parameter count (reopening with another model is an error),
    // and deletes orphaned and temporary files.
    static Result<ProjectStore> open(const ProjectSpec& spec, const std::filesystem::path& stateDir);

    // The last committed round; nothing for a fresh project, whose caller
    // initialises theta_0 and commits version 0 (round 0, no update).
    const std::optional<RoundRecord>& lastRound() const { return m_lastRound; }

    // The state named by the ledger's last round, verified. Error "no_state"
    // for a fresh project.
    Result<GlobalState> loadLatest();
    // The same without theta: the outer momentum and residual (a failed
    // close puts them back from here rather than from copies in memory).
    Result<GlobalState> loadLatestOptimizer();

    // Writes the state (and the encoded update, unless empty), then commits
    // the round naming them; commit.record's state/update file names and
    // version are filled in here. state.version must be the last version + 1
    // (0 first) and commit.record.round the next round.
    Status commit(const GlobalState& state, RoundCommit commit, std::string_view encodedUpdate);
    // commit() in two steps. writeVersion only writes files (any thread,
    // while no commitWritten runs); commitWritten names them in the ledger
    // (removing them when that fails) and prunes what is no longer kept.
    Result<WrittenState> writeVersion(const GlobalStateView& state, std::string_view encodedUpdate) const;
    Status commitWritten(RoundCommit commit, int64_t version, bool withUpdate);
    // commitWritten() in two steps, so that the ledger's transaction (an
    // fsync: up to a second on a busy disk) runs off the loop.
    // commitRecord does the transaction through `ledger`, which may be a
    // second connection to ledger().file() on another thread (while the
    // loop calls no commit), and returns the round as the ledger now has
    // it; noteCommitted then makes it the last round (on the loop).
    Result<RoundRecord> commitRecord(Ledger& ledger, RoundCommit commit, int64_t version, bool withUpdate) const;
    void noteCommitted(RoundRecord record);
    // The files of a version written but never committed (a failed close).
    void removeUncommitted(int64_t version) const;

    // The encoded update that produced `version` (only the latest is kept).
    Result<std::string> readUpdate(int64_t version);

    // The data plan over `data`'s train shards for this project's task size,
    // with the progress of the last committed round restored.
    Result<DataPlan> restoreDataPlan(const engine::DataSet& data);

    Ledger& ledger() { return m_ledger; }
    const std::filesystem::path& dir() const { return m_dir; }
    uint64_t parameterCount() const { return m_parameters; }
    // Files open() removed: orphans of an interrupted commit and temporaries.
    const std::vector<std::filesystem::path>& removedAtOpen() const { return m_removedAtOpen; }

    static std::string stateFileName(int64_t version); // "state/global-<v>.bin"
    static std::string updateFileName(int64_t version); // "state/update-<v>.bin"
    // With deferred pruning a commit only lists the files it no longer
    // keeps; takeUnreferenced() hands them over, for removeFiles() on
    // another thread than the loop (unlinking a GB-sized file takes time).
    void setDeferPruning(bool defer) { m_deferPruning = defer; }
    std::vector<std::filesystem::path> takeUnreferenced();
    static Status removeFiles(const std::vector<std::filesystem::path>& files);
    // Downloads serves theta_version: its file stays past the next commits
    // until released (then it goes, unless it is the last; with deferred
    // pruning it joins the files takeUnreferenced() hands over).
    void holdTheta(int64_t version) { m_heldThetas.insert(version); }
    void releaseTheta(int64_t version);
    // theta_v: "state/state-v<v>", under dir().
    std::filesystem::path thetaFile(int64_t version) const { return m_dir / "state" / thetaFileName(version); }

private:
    Result<GlobalState> loadLast(bool withParams);
    ProjectStore(std::filesystem::path dir, Ledger ledger, uint64_t parameters, uint64_t tokensPerPiece,
        uint32_t piecesPerTask, uint64_t dataSeed, int64_t leaseMs);
    Status checkNext(int64_t version, uint64_t parameters, bool withUpdate) const;
    // `atOpen`: the swarm/ folder of format 1 goes too.
    Result<std::vector<std::filesystem::path>> unreferencedFiles(bool atOpen) const;
    Status removeUnreferencedFiles(std::vector<std::filesystem::path>* removed, bool atOpen);

    std::filesystem::path m_dir;
    Ledger m_ledger;
    uint64_t m_parameters = 0;
    uint64_t m_tokensPerPiece = 0;
    uint32_t m_piecesPerTask = 1;
    uint64_t m_dataSeed = 0;
    int64_t m_leaseMs = 0;
    std::optional<RoundRecord> m_lastRound;
    std::vector<std::filesystem::path> m_removedAtOpen;
    std::set<int64_t> m_heldThetas;
    bool m_deferPruning = false;
    std::vector<std::filesystem::path> m_unreferenced;
};

} // namespace crowdtrain::coordinator
