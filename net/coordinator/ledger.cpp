#include "net/coordinator/ledger.h"
#include "net/wire/error_codes.h"

#include "net/coordinator/ledger_rows.h"
#include "net/coordinator/sqlite_statement.h"

#include <sqlite3.h>

#include <cmath>
#include <utility>

namespace crowdtrain::coordinator {
namespace {

using namespace ledger_rows;

// 'CTLG': the ledger's PRAGMA application_id.
constexpr int32_t kApplicationId = 0x43544C47;

// Schema 1 -> 2: accepted contributions name their task and payload.
constexpr const char* kUpgradeFrom1 = R"sql(
ALTER TABLE contributions ADD COLUMN task_id INTEGER NOT NULL DEFAULT 0;
ALTER TABLE contributions ADD COLUMN payload_sha256 TEXT NOT NULL DEFAULT '';
CREATE INDEX contributions_by_task ON contributions(task_id) WHERE accepted AND task_id > 0;
PRAGMA user_version=2;
)sql";

// Schema 2 -> 3: volunteers keep the device their latest join named.
constexpr const char* kUpgradeFrom2 = R"sql(
ALTER TABLE volunteers ADD COLUMN device TEXT NOT NULL DEFAULT '';
CREATE INDEX contributions_by_round ON contributions(round) WHERE accepted;
PRAGMA user_version=3;
)sql";

constexpr const char* kSchema = R"sql(
CREATE TABLE volunteers(
    public_key TEXT PRIMARY KEY NOT NULL,
    display_name TEXT NOT NULL DEFAULT '',
    first_seen_ms INTEGER NOT NULL,
    last_seen_ms INTEGER NOT NULL,
    device TEXT NOT NULL DEFAULT '') WITHOUT ROWID;
CREATE TABLE rounds(
    round INTEGER PRIMARY KEY,
    version INTEGER NOT NULL,
    tokens INTEGER NOT NULL,
    total_tokens INTEGER NOT NULL,
    train_loss REAL,
    val_loss REAL,
    volunteers_online INTEGER NOT NULL,
    accepted INTEGER NOT NULL,
    rejected INTEGER NOT NULL,
    state_file TEXT NOT NULL,
    update_file TEXT NOT NULL,
    closed_at_ms INTEGER NOT NULL);
CREATE TABLE contributions(
    id INTEGER PRIMARY KEY,
    round INTEGER NOT NULL,
    public_key TEXT NOT NULL REFERENCES volunteers(public_key),
    tokens INTEGER NOT NULL,
    compute_ms INTEGER NOT NULL,
    train_loss REAL,
    accepted INTEGER NOT NULL CHECK (accepted IN (0, 1)),
    reason TEXT NOT NULL,
    submitted_at_ms INTEGER NOT NULL,
    task_id INTEGER NOT NULL DEFAULT 0,
    payload_sha256 TEXT NOT NULL DEFAULT '',
    UNIQUE (round, public_key, submitted_at_ms, accepted, reason));
CREATE INDEX contributions_by_key ON contributions(public_key, accepted);
CREATE INDEX contributions_by_task ON contributions(task_id) WHERE accepted AND task_id > 0;
CREATE INDEX contributions_by_round ON contributions(round) WHERE accepted;
CREATE TABLE metrics(
    id INTEGER PRIMARY KEY,
    time_ms INTEGER NOT NULL,
    round INTEGER NOT NULL,
    tokens INTEGER NOT NULL,
    train_loss REAL,
    val_loss REAL,
    volunteers_online INTEGER NOT NULL);
CREATE INDEX metrics_by_round ON metrics(round);
CREATE TABLE data_progress(
    id INTEGER PRIMARY KEY CHECK (id = 1),
    round INTEGER NOT NULL,
    epoch INTEGER NOT NULL,
    completed_ranges INTEGER NOT NULL,
    total_ranges INTEGER NOT NULL,
    plan BLOB NOT NULL);
CREATE TABLE meta(key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL) WITHOUT ROWID;
)sql";

Status exec(sqlite3* db, const std::string& file, const char* sql)
{
    char* message = nullptr;
    if (sqlite3_exec(db, sql, nullptr, nullptr, &message) == SQLITE_OK)
        return Status::success();
    sqlite3_free(message);
    return sqliteError(db, file, std::string("running \"") + std::string(sql).substr(0, 60) + "\"");
}

Result<int64_t> pragmaInt(sqlite3* db, const std::string& file, const char* sql)
{
    auto s = Statement::prepare(db, file, sql);
    if (!s)
        return s.error();
    auto row = s->step();
    if (!row)
        return row.error();
    return *row ? s->int64(0) : int64_t(0);
}

class Transaction {
public:
    Transaction(sqlite3* db, std::string file)
        : m_db(db)
        , m_file(std::move(file))
    { }
    ~Transaction()
    {
        if (m_open)
            sqlite3_exec(m_db, "ROLLBACK", nullptr, nullptr, nullptr);
    }
    Status begin()
    {
        Status status = exec(m_db, m_file, "BEGIN IMMEDIATE");
        m_open = status.ok();
        return status;
    }
    Status commit()
    {
        Status status = exec(m_db, m_file, "COMMIT");
        if (status.ok())
            m_open = false;
        return status;
    }

private:
    sqlite3* m_db;
    std::string m_file;
    bool m_open = false;
};

Status insertContribution(Statement& insert, Statement& addVolunteer, const ContributionRecord& c)
{
    (void)addVolunteer.reset();
    addVolunteer.bind(1, c.publicKey).bind(2, c.submittedAtMs);
    if (Status s = addVolunteer.run(); !s)
        return s;
    (void)insert.reset();
    insert.bind(1, c.round).bind(2, c.publicKey).bind(3, c.tokens).bind(4, c.computeMs);
    insert.bind(5, std::optional<double>(c.trainLoss)).bind(6, int64_t(c.accepted ? 1 : 0));
    insert.bind(7, c.reason).bind(8, c.submittedAtMs).bind(9, int64_t(c.taskId)).bind(10, c.payloadSha256);
    return insert.run();
}

} // namespace

Result<Ledger> Ledger::open(const std::filesystem::path& path)
{
    const std::string file = path.string();
    sqlite3* raw = nullptr;
    const int rc = sqlite3_open_v2(file.c_str(), &raw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
    Ledger ledger(path, raw); // closes the handle on every error path
    if (rc != SQLITE_OK)
        return sqliteError(raw, file, "opening");
    sqlite3_extended_result_codes(raw, 0);
    sqlite3_busy_timeout(raw, 5000);

    auto applicationId = pragmaInt(raw, file, "PRAGMA application_id");
    if (!applicationId)
        return applicationId.error();
    auto userVersion = pragmaInt(raw, file, "PRAGMA user_version");
    if (!userVersion)
        return userVersion.error();
    auto objects = pragmaInt(raw, file, "SELECT count(*) FROM sqlite_master");
    if (!objects)
        return objects.error();
    const bool fresh = *applicationId == 0 && *userVersion == 0 && *objects == 0;
    if (!fresh) {
        if (*applicationId != kApplicationId)
            return Error::make(
                net::errc::kLedgerForeign, file + " is an SQLite database of another program, not a Crowdtrain ledger");
        if (*userVersion > kSchemaVersion)
            return Error::make(net::errc::kLedgerVersion,
                file + " has ledger schema " + std::to_string(*userVersion) + ", newer than this program's "
                    + std::to_string(kSchemaVersion) + "; upgrade Crowdtrain");
        if (*userVersion < 1)
            return Error::make(
                net::errc::kLedgerVersion, file + " has unknown ledger schema " + std::to_string(*userVersion));
        auto check = Statement::prepare(raw, file, "PRAGMA quick_check");
        if (!check)
            return check.error();
        auto row = check->step();
        if (!row)
            return row.error();
        if (!*row || check->text(0) != "ok")
            return Error::make(
                net::errc::kLedgerCorrupt, file + " is damaged: " + (*row ? check->text(0) : std::string("?")));
    }
    // WAL + FULL: a committed round survives power loss; readers never block the writer.
    for (const char* pragma : {"PRAGMA journal_mode=WAL", "PRAGMA synchronous=FULL", "PRAGMA foreign_keys=ON"}) {
        if (Status s = exec(raw, file, pragma); !s)
            return s.error();
    }
    // Each upgrade step in its own transaction: a crash between them leaves
    // a file of the schema before the step, which the next open upgrades.
    const char* upgrades[] = {kUpgradeFrom1, kUpgradeFrom2}; // [i]: from i + 1
    for (int from = fresh ? kSchemaVersion : int(*userVersion); from < kSchemaVersion; ++from) {
        Transaction tx(raw, file);
        if (Status s = tx.begin(); !s)
            return s.error();
        if (Status s = exec(raw, file, upgrades[from - 1]); !s)
            return s.error();
        if (Status s = tx.commit(); !s)
            return s.error();
    }
    if (fresh) {
        Transaction tx(raw, file);
        if (Status s = tx.begin(); !s)
            return s.error();
        if (Status s = exec(raw, file, kSchema); !s)
            return s.error();
        const std::string ids = "PRAGMA application_id=" + std::to_string(kApplicationId)
            + "; PRAGMA user_version=" + std::to_string(kSchemaVersion);
        if (Status s = exec(raw, file, ids.c_str()); !s)
            return s.error();
        if (Status s = tx.commit(); !s)
            return s.error();
    }
    return ledger;
}

Ledger::Ledger(std::filesystem::path file, sqlite3* db)
    : m_file(std::move(file))
    , m_db(db)
{ }

Ledger::Ledger(Ledger&& other) noexcept
    : m_file(std::move(other.m_file))
    , m_db(std::exchange(other.m_db, nullptr))
{ }

Ledger& Ledger::operator=(Ledger&& other) noexcept
{
    if (this != &other) {
        sqlite3_close_v2(m_db);
        m_file = std::move(other.m_file);
        m_db = std::exchange(other.m_db, nullptr);
    }
    return *this;
}

Ledger::~Ledger()
{
    sqlite3_close_v2(m_db);
}

Status Ledger::upsertVolunteer(
    const std::string& publicKey, const std::string& displayName, const std::string& device, int64_t nowMs)
{
    auto s = Statement::prepare(m_db, m_file.string(),
        "INSERT INTO volunteers(public_key, display_name, first_seen_ms, last_seen_ms, device) VALUES (?1, ?2, ?3, ?3, "
        "?4) ON CONFLICT(public_key) DO UPDATE SET display_name = ?2, last_seen_ms = max(last_seen_ms, ?3), device = "
        "?4");
    if (!s)
        return s.error();
    s->bind(1, publicKey).bind(2, displayName).bind(3, nowMs).bind(4, device);
    return s->run();
}

Result<std::optional<VolunteerRecord>> Ledger::volunteer(const std::string& publicKey)
{
    auto s = Statement::prepare(m_db, m_file.string(),
        "SELECT public_key, display_name, first_seen_ms, last_seen_ms FROM volunteers WHERE public_key = ?1");
    if (!s)
        return s.error();
    s->bind(1, publicKey);
    auto row = s->step();
    if (!row)
        return row.error();
    if (!*row)
        return std::optional<VolunteerRecord>();
    return std::optional<VolunteerRecord>(VolunteerRecord{s->text(0), s->text(1), s->int64(2), s->int64(3)});
}

Status Ledger::commitRound(const RoundCommit& commit)
{
    const std::string file = m_file.string();
    const RoundRecord& r = commit.record;
    for (const ContributionRecord& c : commit.contributions) {
        if (c.round != r.round)
            return Error::make(net::errc::kBadCommit,
                "a contribution for round " + std::to_string(c.round) + " in the commit of round "
                    + std::to_string(r.round));
    }
    Transaction tx(m_db, file);
    if (Status s = tx.begin(); !s)
        return s;
    auto last = lastRound();
    if (!last)
        return last.error();
    const int64_t expected = *last ? (*last)->round + 1 : 0;
    if (r.round != expected)
        return Error::make(net::errc::kBadCommit,
            "round " + std::to_string(r.round) + " cannot be committed: the next round is " + std::to_string(expected));

    auto addVolunteer = Statement::prepare(m_db, file,
        "INSERT OR IGNORE INTO volunteers(public_key, display_name, first_seen_ms, last_seen_ms) VALUES (?1, '', ?2, "
        "?2)");
    auto insert = Statement::prepare(m_db, file,
        std::string("INSERT OR IGNORE INTO contributions(") + kContributionColumns
            + ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)");
    if (!addVolunteer || !insert)
        return !addVolunteer ? addVolunteer.error() : insert.error();
    for (const ContributionRecord& c : commit.contributions) {
        if (Status s = insertContribution(*insert, *addVolunteer, c); !s)
            return s;
    }

    // Counts come from the table, so rejections recorded earlier for this
    // round (recordRejection) count too.
    auto sums = Statement::prepare(m_db, file,
        "SELECT coalesce(sum(CASE WHEN accepted THEN tokens END), 0), coalesce(sum(accepted), 0), "
        "coalesce(sum(1 - accepted), 0), sum(CASE WHEN accepted THEN tokens * train_loss END) / "
        "sum(CASE WHEN accepted AND train_loss IS NOT NULL THEN tokens END) FROM contributions WHERE round = ?1");
    if (!sums)
        return sums.error();
    sums->bind(1, r.round);
    if (auto row = sums->step(); !row)
        return row.error();
    const int64_t tokens = sums->int64(0);
    const int64_t totalTokens = (*last ? (*last)->totalTokens : 0) + tokens;
    const std::optional<double> trainLoss = r.trainLoss ? r.trainLoss : sums->real(3);

    auto round = Statement::prepare(m_db, file,
        std::string("INSERT INTO rounds(") + kRoundColumns
            + ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)");
    if (!round)
        return round.error();
    round->bind(1, r.round).bind(2, r.version).bind(3, tokens).bind(4, totalTokens).bind(5, trainLoss);
    round->bind(6, r.valLoss).bind(7, r.volunteersOnline).bind(8, sums->int64(1)).bind(9, sums->int64(2));
    round->bind(10, r.stateFile).bind(11, r.updateFile).bind(12, r.closedAtMs);
    if (Status s = round->run(); !s)
        return s;

    auto metric = Statement::prepare(m_db, file,
        "INSERT INTO metrics(time_ms, round, tokens, train_loss, val_loss, volunteers_online) "
        "VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
    if (!metric)
        return metric.error();
    metric->bind(1, r.closedAtMs).bind(2, r.round).bind(3, totalTokens).bind(4, trainLoss).bind(5, r.valLoss);
    metric->bind(6, r.volunteersOnline);
    if (Status s = metric->run(); !s)
        return s;

    if (const auto& p = commit.dataProgress) {
        auto progress = Statement::prepare(m_db, file,
            "INSERT OR REPLACE INTO data_progress(id, round, epoch, completed_ranges, total_ranges, plan) "
            "VALUES (1, ?1, ?2, ?3, ?4, ?5)");
        if (!progress)
            return progress.error();
        progress->bind(1, r.round).bind(2, p->epoch).bind(3, p->completedRanges).bind(4, p->totalRanges);
        progress->bindBlob(5, p->blob);
        if (Status s = progress->run(); !s)
            return s;
    }
    return tx.commit();
}

Status Ledger::recordRejection(const ContributionRecord& rejection)
{
    if (rejection.accepted)
        return Error::make(net::errc::kBadCommit, "recordRejection() takes rejected contributions only");
    return recordContribution(rejection);
}

Status Ledger::recordContribution(const ContributionRecord& rejection)
{
    const std::string file = m_file.string();
    Transaction tx(m_db, file);
    if (Status s = tx.begin(); !s)
        return s;
    auto addVolunteer = Statement::prepare(m_db, file,
        "INSERT OR IGNORE INTO volunteers(public_key, display_name, first_seen_ms, last_seen_ms) VALUES (?1, '', ?2, "
        "?2)");
    auto insert = Statement::prepare(m_db, file,
        std::string("INSERT OR IGNORE INTO contributions(") + kContributionColumns
            + ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)");
    if (!addVolunteer || !insert)
        return !addVolunteer ? addVolunteer.error() : insert.error();
    if (Status s = insertContribution(*insert, *addVolunteer, rejection); !s)
        return s;
    return tx.commit();
}

Status Ledger::setValidationLoss(int64_t round, double valLoss)
{
    const std::string file = m_file.string();
    Transaction tx(m_db, file);
    if (Status s = tx.begin(); !s)
        return s;
    for (const char* sql :
        {"UPDATE rounds SET val_loss = ?2 WHERE round = ?1", "UPDATE metrics SET val_loss = ?2 WHERE round = ?1"}) {
        auto statement = Statement::prepare(m_db, file, sql);
        if (!statement)
            return statement.error();
        statement->bind(1, round);
        statement->bind(2, std::optional<double>(valLoss));
        auto done = statement->step();
        if (!done)
            return done.error();
    }
    return tx.commit();
}

Status Ledger::appendMetric(const MetricSample& m)
{
    auto s = Statement::prepare(m_db, m_file.string(),
        "INSERT INTO metrics(time_ms, round, tokens, train_loss, val_loss, volunteers_online) "
        "VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
    if (!s)
        return s.error();
    s->bind(1, m.timeMs).bind(2, m.round).bind(3, m.tokens).bind(4, m.trainLoss).bind(5, m.valLoss);
    s->bind(6, m.volunteersOnline);
    return s->run();
}

} // namespace crowdtrain::coordinator
