#pragma once

// A prepared SQLite statement that finalizes itself, with errors as values
// naming the database file. Private to the ledger; one thread.

#include "core/result.h"
#include "net/wire/error_codes.h"

#include <sqlite3.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace crowdtrain::coordinator {

inline Error sqliteError(sqlite3* db, const std::string& file, const std::string& what)
{
    const int code = db ? sqlite3_errcode(db) : SQLITE_ERROR;
    const std::string message = db ? sqlite3_errmsg(db) : "out of memory";
    if (code == SQLITE_CORRUPT || code == SQLITE_NOTADB)
        return Error::make(net::errc::kLedgerCorrupt,
            file + " is not a Crowdtrain ledger or is damaged (" + message + ") while " + what);
    return Error::make(net::errc::kLedgerError, file + ": " + what + ": " + message);
}

class Statement {
public:
    static Result<Statement> prepare(sqlite3* db, const std::string& file, std::string_view sql)
    {
        sqlite3_stmt* stmt = nullptr;
        if (sqlite3_prepare_v2(db, sql.data(), int(sql.size()), &stmt, nullptr) != SQLITE_OK)
            return sqliteError(db, file, "preparing \"" + std::string(sql.substr(0, 60)) + "\"");
        return Statement(db, file, stmt);
    }

    Statement(Statement&& other) noexcept
        : m_db(other.m_db)
        , m_file(std::move(other.m_file))
        , m_stmt(std::exchange(other.m_stmt, nullptr))
    { }
    Statement& operator=(Statement&&) = delete;
    Statement(const Statement&) = delete;
    Statement& operator=(const Statement&) = delete;
    ~Statement() { sqlite3_finalize(m_stmt); }

    Statement& bind(int index, int64_t value)
    {
        sqlite3_bind_int64(m_stmt, index, value);
        return *this;
    }
    Statement& bind(int index, std::string_view value)
    {
        // A null pointer would bind NULL; an empty string is still a string.
        sqlite3_bind_text(m_stmt, index, value.empty() ? "" : value.data(), int(value.size()), SQLITE_TRANSIENT);
        return *this;
    }
    Statement& bindBlob(int index, std::string_view value)
    {
        if (value.empty())
            sqlite3_bind_zeroblob(m_stmt, index, 0);
        else
            sqlite3_bind_blob(m_stmt, index, value.data(), int(value.size()), SQLITE_TRANSIENT);
        return *this;
    }
    // Non-finite values are stored as NULL (SQLite has no NaN).
    Statement& bind(int index, std::optional<double> value)
    {
        if (value && std::isfinite(*value))
            sqlite3_bind_double(m_stmt, index, *value);
        else
            sqlite3_bind_null(m_stmt, index);
        return *this;
    }

    // True while a row is available.
    Result<bool> step()
    {
        const int rc = sqlite3_step(m_stmt);
        if (rc == SQLITE_ROW)
            return true;
        if (rc == SQLITE_DONE)
            return false;
        return sqliteError(m_db, m_file, "running \"" + std::string(sqlite3_sql(m_stmt)).substr(0, 60) + "\"");
    }
    Status run()
    {
        auto stepped = step();
        if (!stepped)
            return stepped.error();
        return Status::success();
    }
    Status reset()
    {
        sqlite3_reset(m_stmt);
        sqlite3_clear_bindings(m_stmt);
        return Status::success();
    }

    int64_t int64(int column) const { return sqlite3_column_int64(m_stmt, column); }
    std::optional<double> real(int column) const
    {
        if (sqlite3_column_type(m_stmt, column) == SQLITE_NULL)
            return std::nullopt;
        return sqlite3_column_double(m_stmt, column);
    }
    std::string text(int column) const
    {
        const auto* data = reinterpret_cast<const char*>(sqlite3_column_text(m_stmt, column));
        return data ? std::string(data, std::size_t(sqlite3_column_bytes(m_stmt, column))) : std::string();
    }
    std::string blob(int column) const
    {
        const auto* data = static_cast<const char*>(sqlite3_column_blob(m_stmt, column));
        return data ? std::string(data, std::size_t(sqlite3_column_bytes(m_stmt, column))) : std::string();
    }

private:
    Statement(sqlite3* db, std::string file, sqlite3_stmt* stmt)
        : m_db(db)
        , m_file(std::move(file))
        , m_stmt(stmt)
    { }

    sqlite3* m_db;
    std::string m_file;
    sqlite3_stmt* m_stmt;
};

} // namespace crowdtrain::coordinator
