#pragma once

// The coordinator's ledger: one SQLite file per project (WAL journal,
// synchronous=FULL, foreign keys on) holding volunteers, closed rounds, every
// contribution (accepted or rejected, with the reason), the metric history
// and the data plan's progress. A round is committed in ONE transaction
// (round row, contributions, metrics sample, data progress), so after a
// crash it is either all there or absent.
//
// The file says what it is: PRAGMA application_id = 'CTLG' and
// user_version = schema version, checked on open; a corrupt file, another
// program's database or a newer schema is a clear error.
//
// A Ledger owns its connection: move-only, used from one thread.

#include "core/result.h"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

struct sqlite3;

namespace crowdtrain::coordinator {

struct ContributionRecord {
    int64_t round = 0; // the round the submission was made for
    std::string publicKey; // the volunteer's Curve public key (Z85 or hex; opaque here)
    int64_t tokens = 0;
    int64_t computeMs = 0;
    double trainLoss = 0;
    bool accepted = false;
    std::string reason; // why it was rejected; empty when accepted
    int64_t submittedAtMs = 0; // Unix epoch milliseconds
    // Of an accepted submission: the task it answered and its payload's
    // SHA-256 (lowercase hex), so that a re-sent submit of it is recognised
    // (0 and empty: unknown, e.g. a rejection).
    uint64_t taskId = 0;
    std::string payloadSha256;
};

// An accepted task, as a re-sent submit is checked against.
struct AcceptedTask {
    int64_t round = 0;
    std::string publicKey;
    std::string payloadSha256;
};

struct MetricSample {
    int64_t timeMs = 0;
    int64_t round = 0;
    int64_t tokens = 0; // project total so far
    std::optional<double> trainLoss;
    std::optional<double> valLoss;
    int64_t volunteersOnline = 0;
};

struct RoundRecord {
    int64_t round = 0; // rounds are numbered 0 (theta_0), 1, 2, ... without gaps
    int64_t version = 0; // the version of the global weights after this round
    int64_t tokens = 0; // accepted tokens of this round
    int64_t totalTokens = 0; // accepted tokens of the project up to and including this round
    std::optional<double> trainLoss; // token-weighted mean of the accepted submissions
    std::optional<double> valLoss;
    int64_t volunteersOnline = 0;
    int64_t accepted = 0;
    int64_t rejected = 0;
    std::string stateFile; // relative to the state folder, e.g. "state/global-12.bin"
    std::string updateFile; // the encoded update that produced this version; empty for version 0
    int64_t closedAtMs = 0;
};

// Everything that becomes durable when a round closes.
struct RoundCommit {
    RoundRecord record; // accepted/rejected/tokens/totalTokens are computed from `contributions`
    std::vector<ContributionRecord> contributions; // each contribution's round must be record.round
    struct DataProgress {
        int64_t epoch = 0;
        int64_t completedRanges = 0;
        int64_t totalRanges = 0;
        std::string blob; // DataPlan::serialize()
    };
    std::optional<DataProgress> dataProgress; // absent: the previous progress stays
};

struct LeaderboardEntry {
    std::string publicKey;
    std::string displayName;
    int64_t tokens = 0; // accepted tokens
    int64_t accepted = 0;
    int64_t rejected = 0;
    double computeSeconds = 0; // of accepted contributions
    double share = 0; // tokens / all accepted tokens of the project, in [0, 1]
    std::string device; // as its latest join named it
};

// Accepted work by the device its volunteers named (their latest join's).
struct DeviceMixRow {
    std::string device; // "unknown" for keys that named none
    int64_t volunteers = 0;
    int64_t tokens = 0;
};

struct VolunteerRecord {
    std::string publicKey;
    std::string displayName;
    int64_t firstSeenMs = 0;
    int64_t lastSeenMs = 0;
};

class Ledger {
public:
    // 2: contributions keep task_id and payload_sha256; 3: volunteers keep
    // the device their latest join named (older files are upgraded in place
    // when opened).
    static constexpr int kSchemaVersion = 3;

    // Creates the file (and its schema) when it does not exist.
    static Result<Ledger> open(const std::filesystem::path& file);

    Ledger(Ledger&& other) noexcept;
    Ledger& operator=(Ledger&& other) noexcept;
    Ledger(const Ledger&) = delete;
    Ledger& operator=(const Ledger&) = delete;
    ~Ledger();

    // Inserts the volunteer, or updates its display name, device and last_seen.
    Status upsertVolunteer(
        const std::string& publicKey, const std::string& displayName, const std::string& device, int64_t nowMs);
    Result<std::optional<VolunteerRecord>> volunteer(const std::string& publicKey);

    // Round numbers must increase by one (the first is 0). Contributions of
    // unknown volunteers add them with an empty display name. A contribution
    // already recorded (same round, key, submitted_at, accepted, reason:
    // a rejection written by recordRejection()) is not written twice.
    Status commitRound(const RoundCommit& commit);

    // Writes one rejected contribution now, whether or not its round is ever
    // committed: a rejection is information about its sender.
    // Any contribution of the open round, written at once: a durably
    // accepted submission is in the ledger before it is acknowledged, and
    // commitRound() repeating it later adds nothing.
    Status recordContribution(const ContributionRecord& contribution);
    // The validation loss of a committed round, evaluated after its commit.
    Status setValidationLoss(int64_t round, double valLoss);
    Status recordRejection(const ContributionRecord& rejection);

    // A metric sample between rounds (volunteers online, say).
    Status appendMetric(const MetricSample& sample);

    Result<std::optional<RoundRecord>> lastRound();
    Result<std::optional<RoundRecord>> round(int64_t round);
    // The rounds whose state files are still referenced, newest first.
    Result<std::vector<RoundRecord>> lastRounds(int limit);

    // Ordered by accepted tokens, then key.
    Result<std::vector<LeaderboardEntry>> leaderboard(int limit);
    // Accepted tokens by device, most first (ties by name): of round `round`,
    // or of the whole project when it is absent. At most `limit` rows.
    Result<std::vector<DeviceMixRow>> deviceMix(std::optional<int64_t> round, int limit);
    Result<LeaderboardEntry> volunteerTotals(const std::string& publicKey);
    Result<std::vector<MetricSample>> metricHistory(int64_t sinceRound);
    Result<std::vector<ContributionRecord>> contributionsOfRound(int64_t round);
    // Rejections of one volunteer, or of one round; newest first, at most `limit`.
    Result<std::vector<ContributionRecord>> rejectionsOf(const std::string& publicKey, int limit = 1000);
    Result<std::vector<ContributionRecord>> rejectionsInRound(int64_t round);
    // The accepted submission that answered task `taskId`, if any.
    Result<std::optional<AcceptedTask>> acceptedTask(uint64_t taskId);
    Result<std::optional<RoundCommit::DataProgress>> dataProgress();

    // Small key/value settings (project name, parameter count) that tie a
    // state folder to its project.
    Result<std::optional<std::string>> meta(const std::string& key);
    Status setMeta(const std::string& key, const std::string& value);

    const std::filesystem::path& file() const { return m_file; }

private:
    Ledger(std::filesystem::path file, sqlite3* db);

    std::filesystem::path m_file;
    sqlite3* m_db = nullptr;
};

} // namespace crowdtrain::coordinator
