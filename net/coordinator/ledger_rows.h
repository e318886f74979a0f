#pragma once

// Row mapping shared by the ledger's writers and readers. Private to the
// ledger.

#include "net/coordinator/ledger.h"
#include "net/coordinator/sqlite_statement.h"

#include <cmath>
#include <vector>

namespace crowdtrain::coordinator::ledger_rows {

inline constexpr const char* kRoundColumns
    = "round, version, tokens, total_tokens, train_loss, val_loss, volunteers_online, "
      "accepted, rejected, state_file, update_file, closed_at_ms";
inline constexpr const char* kContributionColumns
    = "round, public_key, tokens, compute_ms, train_loss, accepted, reason, submitted_at_ms, task_id, payload_sha256";

inline RoundRecord roundFrom(const Statement& s)
{
    return RoundRecord{s.int64(0), s.int64(1), s.int64(2), s.int64(3), s.real(4), s.real(5), s.int64(6), s.int64(7),
        s.int64(8), s.text(9), s.text(10), s.int64(11)};
}

inline ContributionRecord contributionFrom(const Statement& s)
{
    return ContributionRecord{s.int64(0), s.text(1), s.int64(2), s.int64(3), s.real(4).value_or(std::nan("")),
        s.int64(5) != 0, s.text(6), s.int64(7), uint64_t(s.int64(8)), s.text(9)};
}

template <typename T, typename Read> Result<std::vector<T>> collect(Statement& s, Read read)
{
    std::vector<T> out;
    while (true) {
        auto row = s.step();
        if (!row)
            return row.error();
        if (!*row)
            return out;
        out.push_back(read(s));
    }
}

// Rolls back unless committed: every early return inside a transaction is safe.
} // namespace crowdtrain::coordinator::ledger_rows
