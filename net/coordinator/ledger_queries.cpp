#include "net/coordinator/ledger.h"

#include "net/coordinator/ledger_rows.h"

#include <cstdint>

// The ledger's read side: rounds, leaderboard, history, rejections.

namespace crowdtrain::coordinator {

using namespace ledger_rows;

Result<std::optional<RoundRecord>> Ledger::lastRound()
{
    auto rounds = lastRounds(1);
    if (!rounds)
        return rounds.error();
    if (rounds->empty())
        return std::optional<RoundRecord>();
    return std::optional<RoundRecord>(rounds->front());
}

Result<std::optional<RoundRecord>> Ledger::round(int64_t number)
{
    auto s = Statement::prepare(
        m_db, m_file.string(), std::string("SELECT ") + kRoundColumns + " FROM rounds WHERE round = ?1");
    if (!s)
        return s.error();
    s->bind(1, number);
    auto rows = collect<RoundRecord>(*s, roundFrom);
    if (!rows)
        return rows.error();
    return rows->empty() ? std::optional<RoundRecord>() : std::optional<RoundRecord>(rows->front());
}

Result<std::vector<RoundRecord>> Ledger::lastRounds(int limit)
{
    auto s = Statement::prepare(
        m_db, m_file.string(), std::string("SELECT ") + kRoundColumns + " FROM rounds ORDER BY round DESC LIMIT ?1");
    if (!s)
        return s.error();
    s->bind(1, int64_t(limit));
    return collect<RoundRecord>(*s, roundFrom);
}

Result<std::vector<LeaderboardEntry>> Ledger::leaderboard(int limit)
{
    auto s = Statement::prepare(m_db, m_file.string(),
        "WITH totals AS (SELECT public_key, coalesce(sum(CASE WHEN accepted THEN tokens END), 0) AS tokens, "
        "  sum(accepted) AS accepted, sum(1 - accepted) AS rejected, "
        "  coalesce(sum(CASE WHEN accepted THEN compute_ms END), 0) AS compute_ms "
        "  FROM contributions GROUP BY public_key), "
        "project AS (SELECT coalesce(sum(tokens), 0) AS tokens FROM contributions WHERE accepted) "
        "SELECT t.public_key, coalesce(v.display_name, ''), t.tokens, t.accepted, t.rejected, t.compute_ms, "
        "  CASE WHEN project.tokens > 0 THEN CAST(t.tokens AS REAL) / project.tokens ELSE 0 END, "
        "  coalesce(v.device, '') "
        "FROM totals t CROSS JOIN project LEFT JOIN volunteers v ON v.public_key = t.public_key "
        "ORDER BY t.tokens DESC, t.public_key LIMIT ?1");
    if (!s)
        return s.error();
    s->bind(1, int64_t(limit));
    return collect<LeaderboardEntry>(*s, [](const Statement& row) {
        return LeaderboardEntry{row.text(0), row.text(1), row.int64(2), row.int64(3), row.int64(4),
            double(row.int64(5)) / 1000.0, row.real(6).value_or(0.0), row.text(7)};
    });
}

Result<std::vector<DeviceMixRow>> Ledger::deviceMix(std::optional<int64_t> round, int limit)
{
    // One round's rows come by contributions_by_round (list_checkpoints asks
    // this for every checkpoint it lists).
    auto s = Statement::prepare(m_db, m_file.string(),
        std::string("SELECT coalesce(nullif(v.device, ''), 'unknown') AS name, count(DISTINCT c.public_key), "
                    "sum(c.tokens) FROM contributions c LEFT JOIN volunteers v ON v.public_key = c.public_key "
                    "WHERE c.accepted")
            + (round ? " AND c.round = ?2" : "") + " GROUP BY name ORDER BY sum(c.tokens) DESC, name LIMIT ?1");
    if (!s)
        return s.error();
    s->bind(1, int64_t(limit));
    if (round)
        s->bind(2, *round);
    return collect<DeviceMixRow>(*s, [](const Statement& row) {
        return DeviceMixRow{row.text(0), row.int64(1), row.int64(2)};
    });
}

Result<LeaderboardEntry> Ledger::volunteerTotals(const std::string& publicKey)
{
    auto s = Statement::prepare(m_db, m_file.string(),
        "SELECT coalesce(sum(CASE WHEN accepted THEN tokens END), 0), coalesce(sum(accepted), 0), "
        "coalesce(sum(1 - accepted), 0), coalesce(sum(CASE WHEN accepted THEN compute_ms END), 0), "
        "(SELECT coalesce(sum(tokens), 0) FROM contributions WHERE accepted), "
        "(SELECT display_name FROM volunteers WHERE public_key = ?1), "
        "(SELECT device FROM volunteers WHERE public_key = ?1) "
        "FROM contributions WHERE public_key = ?1");
    if (!s)
        return s.error();
    s->bind(1, publicKey);
    if (auto row = s->step(); !row)
        return row.error();
    const int64_t projectTokens = s->int64(4);
    return LeaderboardEntry{publicKey, s->text(5), s->int64(0), s->int64(1), s->int64(2), double(s->int64(3)) / 1000.0,
        projectTokens > 0 ? double(s->int64(0)) / double(projectTokens) : 0.0, s->text(6)};
}

Result<std::vector<MetricSample>> Ledger::metricHistory(int64_t sinceRound)
{
    auto s = Statement::prepare(m_db, m_file.string(),
        "SELECT time_ms, round, tokens, train_loss, val_loss, volunteers_online FROM metrics "
        "WHERE round >= ?1 ORDER BY time_ms, id");
    if (!s)
        return s.error();
    s->bind(1, sinceRound);
    return collect<MetricSample>(*s, [](const Statement& row) {
        return MetricSample{row.int64(0), row.int64(1), row.int64(2), row.real(3), row.real(4), row.int64(5)};
    });
}

Result<std::vector<ContributionRecord>> Ledger::contributionsOfRound(int64_t round)
{
    auto s = Statement::prepare(m_db, m_file.string(),
        std::string("SELECT ") + kContributionColumns + " FROM contributions WHERE round = ?1 ORDER BY id");
    if (!s)
        return s.error();
    s->bind(1, round);
    return collect<ContributionRecord>(*s, contributionFrom);
}

Result<std::vector<ContributionRecord>> Ledger::rejectionsOf(const std::string& publicKey, int limit)
{
    auto s = Statement::prepare(m_db, m_file.string(),
        std::string("SELECT ") + kContributionColumns
            + " FROM contributions WHERE public_key = ?1 AND NOT accepted ORDER BY submitted_at_ms DESC, id DESC "
              "LIMIT ?2");
    if (!s)
        return s.error();
    s->bind(1, publicKey).bind(2, int64_t(limit));
    return collect<ContributionRecord>(*s, contributionFrom);
}

Result<std::vector<ContributionRecord>> Ledger::rejectionsInRound(int64_t round)
{
    auto s = Statement::prepare(m_db, m_file.string(),
        std::string("SELECT ") + kContributionColumns
            + " FROM contributions WHERE round = ?1 AND NOT accepted ORDER BY id");
    if (!s)
        return s.error();
    s->bind(1, round);
    return collect<ContributionRecord>(*s, contributionFrom);
}

Result<std::optional<AcceptedTask>> Ledger::acceptedTask(uint64_t taskId)
{
    if (taskId == 0 || taskId > uint64_t(INT64_MAX))
        return std::optional<AcceptedTask>();
    auto s = Statement::prepare(m_db, m_file.string(),
        "SELECT round, public_key, payload_sha256 FROM contributions WHERE accepted AND task_id = ?1 AND task_id > 0 "
        "ORDER BY id LIMIT 1");
    if (!s)
        return s.error();
    s->bind(1, int64_t(taskId));
    auto row = s->step();
    if (!row)
        return row.error();
    if (!*row)
        return std::optional<AcceptedTask>();
    return std::optional<AcceptedTask>(AcceptedTask{s->int64(0), s->text(1), s->text(2)});
}

Result<std::optional<RoundCommit::DataProgress>> Ledger::dataProgress()
{
    auto s = Statement::prepare(
        m_db, m_file.string(), "SELECT epoch, completed_ranges, total_ranges, plan FROM data_progress WHERE id = 1");
    if (!s)
        return s.error();
    auto row = s->step();
    if (!row)
        return row.error();
    if (!*row)
        return std::optional<RoundCommit::DataProgress>();
    return std::optional<RoundCommit::DataProgress>(
        RoundCommit::DataProgress{s->int64(0), s->int64(1), s->int64(2), s->blob(3)});
}

Result<std::optional<std::string>> Ledger::meta(const std::string& key)
{
    auto s = Statement::prepare(m_db, m_file.string(), "SELECT value FROM meta WHERE key = ?1");
    if (!s)
        return s.error();
    s->bind(1, key);
    auto row = s->step();
    if (!row)
        return row.error();
    return *row ? std::optional<std::string>(s->text(0)) : std::optional<std::string>();
}

Status Ledger::setMeta(const std::string& key, const std::string& value)
{
    auto s = Statement::prepare(m_db, m_file.string(), "INSERT OR REPLACE INTO meta(key, value) VALUES (?1, ?2)");
    if (!s)
        return s.error();
    s->bind(1, key).bind(2, value);
    return s->run();
}

} // namespace crowdtrain::coordinator
