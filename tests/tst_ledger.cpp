// The ledger on real SQLite files: commit and reopen, leaderboard sums,
// immediate rejections, metric history, bad files, and a committing process
// killed with SIGKILL (the last round is all there or absent, never half).
#include "coordinator_fixtures.h"

#include "net/coordinator/ledger.h"

#include <sqlite3.h>

#include <QCoreApplication>
#include <QProcess>
#include <QTemporaryDir>
#include <QTest>

#include <cstdio>
#include <iostream>
#include <map>
#include <random>

using namespace crowdtrain;
using namespace crowdtrain::coordinator;

namespace {

const char* const kChildVariable = "CT_LEDGER_CRASH_CHILD";

using testing::orFail;

// The crash test's deterministic rounds: round r has r % 5 + 1 accepted
// contributions of 100 * (i + 1) tokens and one rejection.
RoundCommit roundOf(int64_t r)
{
    RoundCommit c;
    c.record.round = r;
    c.record.version = r;
    c.record.valLoss = 3.0 - 0.001 * double(r);
    c.record.volunteersOnline = r % 5 + 2;
    c.record.stateFile = "state/global-" + std::to_string(r) + ".bin";
    c.record.closedAtMs = 1000 * r;
    for (int64_t i = 0; i <= r % 5; ++i)
        c.contributions.push_back(
            {r, "key-" + std::to_string(i), 100 * (i + 1), 10, 2.5, true, "", 1000 * r + i, 0, {}});
    c.contributions.push_back({r, "key-bad", 50, 10, 9.0, false, "norm too large", 1000 * r + 99, 0, {}});
    c.dataProgress = RoundCommit::DataProgress{r / 10, r % 10, 10, std::string(16, char('a' + r % 26))};
    return c;
}

int64_t roundTokens(int64_t r)
{
    int64_t tokens = 0;
    for (int64_t i = 0; i <= r % 5; ++i)
        tokens += 100 * (i + 1);
    return tokens;
}

// Child mode: commits rounds forever, printing each round once it is durable.
int runCommittingChild(const char* file)
{
    auto ledger = Ledger::open(file);
    if (!ledger)
        return 2;
    auto last = ledger->lastRound();
    if (!last)
        return 3;
    for (int64_t r = *last ? (**last).round + 1 : 0;; ++r) {
        if (!ledger->commitRound(roundOf(r)).ok())
            return 4;
        std::printf("%lld\n", static_cast<long long>(r));
        std::fflush(stdout);
    }
}

} // namespace

class TestLedger : public QObject {
    Q_OBJECT

private:
    QTemporaryDir m_dir;

    std::filesystem::path path(const std::string& name) const { return m_dir.path().toStdString() + "/" + name; }

private slots:
    void commitAndReopen()
    {
        const auto file = path("reopen.sqlite");
        {
            Ledger ledger = orFail(Ledger::open(file));
            QVERIFY(!orFail(ledger.lastRound()));
            QVERIFY(ledger.upsertVolunteer("key-0", "Ada", "CPU", 5).ok());
            for (int64_t r = 0; r < 3; ++r)
                QVERIFY(ledger.commitRound(roundOf(r)).ok());
        }
        Ledger ledger = orFail(Ledger::open(file));
        const auto last = orFail(ledger.lastRound());
        QVERIFY(last);
        QCOMPARE(last->round, int64_t(2));
        QCOMPARE(last->version, int64_t(2));
        QCOMPARE(last->tokens, roundTokens(2));
        QCOMPARE(last->totalTokens, roundTokens(0) + roundTokens(1) + roundTokens(2));
        QCOMPARE(last->accepted, int64_t(3));
        QCOMPARE(last->rejected, int64_t(1));
        QCOMPARE(last->trainLoss.value_or(0), 2.5); // token-weighted mean of the accepted
        QCOMPARE(last->valLoss.value_or(0), 3.0 - 0.002);
        QCOMPARE(last->stateFile, std::string("state/global-2.bin"));
        QCOMPARE(orFail(ledger.contributionsOfRound(2)).size(), std::size_t(4));
        const auto progress = orFail(ledger.dataProgress());
        QVERIFY(progress);
        QCOMPARE(progress->completedRanges, int64_t(2));
        QCOMPARE(progress->blob, std::string(16, 'c'));
        const auto ada = orFail(ledger.volunteer("key-0"));
        QVERIFY(ada);
        QCOMPARE(ada->displayName, std::string("Ada"));
        QCOMPARE(ada->firstSeenMs, int64_t(5));
        // Unknown senders are added with an empty name.
        QCOMPARE(orFail(ledger.volunteer("key-bad"))->displayName, std::string());
    }

    void roundsMustFollowEachOther()
    {
        Ledger ledger = orFail(Ledger::open(path("order.sqlite")));
        QVERIFY(!ledger.commitRound(roundOf(1)).ok()); // the first round is 0
        QVERIFY(ledger.commitRound(roundOf(0)).ok());
        const Status skipped = ledger.commitRound(roundOf(2));
        QVERIFY(!skipped.ok());
        QCOMPARE(skipped.error().code, std::string("bad_commit"));
        QVERIFY(!ledger.commitRound(roundOf(0)).ok()); // no second round 0
        RoundCommit mixed = roundOf(1);
        mixed.contributions[0].round = 7;
        QVERIFY(!ledger.commitRound(mixed).ok());
        // Nothing of the refused commits was written.
        QCOMPARE(orFail(ledger.lastRound())->round, int64_t(0));
        QVERIFY(orFail(ledger.contributionsOfRound(1)).empty());
        QCOMPARE(orFail(ledger.metricHistory(0)).size(), std::size_t(1));
    }

    void leaderboardSums()
    {
        Ledger ledger = orFail(Ledger::open(path("board.sqlite")));
        QVERIFY(ledger.upsertVolunteer("alice", "Alice", "NVIDIA GeForce RTX 4090, 24 GiB", 1).ok());
        QVERIFY(ledger.upsertVolunteer("bob", "Bob", "CPU", 1).ok());
        QVERIFY(ledger.upsertVolunteer("bob", "Bobby", "NVIDIA GeForce RTX 4090, 24 GiB", 9).ok()); // renamed, new GPU
        RoundCommit r0;
        r0.record.round = 0;
        r0.record.stateFile = "s0";
        QVERIFY(ledger.commitRound(r0).ok());
        RoundCommit r1;
        r1.record.round = 1;
        r1.record.stateFile = "s1";
        r1.contributions = {{1, "alice", 600, 2000, 2.0, true, "", 10, 41, std::string(64, 'a')},
            {1, "bob", 200, 1500, 4.0, true, "", 11, 42, std::string(64, 'b')},
            {1, "bob", 999, 100, 9.0, false, "stale version", 12, 0, {}}};
        QVERIFY(ledger.commitRound(r1).ok());
        RoundCommit r2;
        r2.record.round = 2;
        r2.record.stateFile = "s2";
        r2.contributions = {{2, "bob", 200, 500, 3.0, true, "", 20, 43, std::string(64, 'c')},
            {2, "carol", 0, 0, 0, false, "not finite", 21, 0, {}}};
        QVERIFY(ledger.commitRound(r2).ok());

        // An accepted task is found by its id, with its key and payload hash
        // (a re-sent submit is answered from this); rejections are not.
        const auto task42 = orFail(ledger.acceptedTask(42));
        QVERIFY(task42.has_value());
        QCOMPARE(task42->round, int64_t(1));
        QCOMPARE(task42->publicKey, std::string("bob"));
        QCOMPARE(task42->payloadSha256, std::string(64, 'b'));
        QVERIFY(!orFail(ledger.acceptedTask(0)).has_value());
        QVERIFY(!orFail(ledger.acceptedTask(44)).has_value());
        QVERIFY(!orFail(ledger.acceptedTask(UINT64_MAX)).has_value());

        const auto board = orFail(ledger.leaderboard(10));
        QCOMPARE(board.size(), std::size_t(3));
        QCOMPARE(board[0].publicKey, std::string("alice"));
        QCOMPARE(board[0].tokens, int64_t(600));
        QCOMPARE(board[0].accepted, int64_t(1));
        QCOMPARE(board[0].rejected, int64_t(0));
        QCOMPARE(board[0].computeSeconds, 2.0);
        QCOMPARE(board[0].share, 0.6);
        QCOMPARE(board[1].displayName, std::string("Bobby"));
        QCOMPARE(board[1].tokens, int64_t(400)); // the rejected 999 do not count
        QCOMPARE(board[1].accepted, int64_t(2));
        QCOMPARE(board[1].rejected, int64_t(1));
        QCOMPARE(board[1].computeSeconds, 2.0);
        QCOMPARE(board[1].share, 0.4);
        QCOMPARE(board[2].publicKey, std::string("carol"));
        QCOMPARE(board[2].share, 0.0);
        QCOMPARE(orFail(ledger.leaderboard(1)).size(), std::size_t(1));

        const LeaderboardEntry bob = orFail(ledger.volunteerTotals("bob"));
        QCOMPARE(bob.tokens, board[1].tokens);
        QCOMPARE(bob.rejected, int64_t(1));
        QCOMPARE(bob.share, 0.4);
        QCOMPARE(bob.displayName, std::string("Bobby"));
        const LeaderboardEntry nobody = orFail(ledger.volunteerTotals("nobody"));
        QCOMPARE(nobody.tokens, int64_t(0));
        QCOMPARE(orFail(ledger.lastRound())->totalTokens, int64_t(1000));
        QCOMPARE(orFail(ledger.round(1))->trainLoss.value_or(0), (600 * 2.0 + 200 * 4.0) / 800);

        // Devices: as each key's latest join named it; carol named none.
        QCOMPARE(board[0].device, std::string("NVIDIA GeForce RTX 4090, 24 GiB"));
        QCOMPARE(board[2].device, std::string());
        QCOMPARE(bob.device, std::string("NVIDIA GeForce RTX 4090, 24 GiB"));
        const auto all = orFail(ledger.deviceMix(std::nullopt, 10));
        QCOMPARE(all.size(), std::size_t(1)); // carol's only submission was rejected
        QCOMPARE(all[0].device, std::string("NVIDIA GeForce RTX 4090, 24 GiB"));
        QCOMPARE(all[0].volunteers, int64_t(2));
        QCOMPARE(all[0].tokens, int64_t(1000));
        QVERIFY(ledger.upsertVolunteer("bob", "Bobby", "CPU", 30).ok());
        const auto round2 = orFail(ledger.deviceMix(2, 10));
        QCOMPARE(round2.size(), std::size_t(1));
        QCOMPARE(round2[0].device, std::string("CPU"));
        QCOMPARE(round2[0].tokens, int64_t(200));
        const auto round1 = orFail(ledger.deviceMix(1, 10));
        QCOMPARE(round1.size(), std::size_t(2));
        QCOMPARE(round1[0].device, std::string("NVIDIA GeForce RTX 4090, 24 GiB")); // alice's 600 first
        QCOMPARE(round1[0].tokens, int64_t(600));
        QCOMPARE(round1[1].device, std::string("CPU"));
        QCOMPARE(orFail(ledger.deviceMix(1, 1)).size(), std::size_t(1));
        QVERIFY(orFail(ledger.deviceMix(7, 10)).empty());
    }

    // A ledger of schema 2 (before volunteers kept their device) is upgraded
    // in place when opened; what it held stays.
    void schemaTwoIsUpgraded()
    {
        const std::string file = path("old.sqlite").string();
        {
            Ledger ledger = orFail(Ledger::open(file));
            QVERIFY(ledger.upsertVolunteer("alice", "Alice", "CPU", 1).ok());
        }
        sqlite3* db = nullptr;
        QCOMPARE(sqlite3_open(file.c_str(), &db), SQLITE_OK);
        QCOMPARE(sqlite3_exec(db,
                     "DROP INDEX contributions_by_round; ALTER TABLE volunteers DROP COLUMN device; "
                     "PRAGMA user_version = 2",
                     nullptr, nullptr, nullptr),
            SQLITE_OK);
        sqlite3_close(db);
        {
            Ledger ledger = orFail(Ledger::open(file));
            const auto alice = orFail(ledger.volunteer("alice"));
            QVERIFY(alice.has_value());
            QCOMPARE(alice->displayName, std::string("Alice"));
            QVERIFY(ledger.upsertVolunteer("alice", "Alice", "NVIDIA H100, 80 GiB", 2).ok());
            QCOMPARE(orFail(ledger.volunteerTotals("alice")).device, std::string("NVIDIA H100, 80 GiB"));
        }
        QCOMPARE(sqlite3_open(file.c_str(), &db), SQLITE_OK);
        sqlite3_stmt* version = nullptr;
        QCOMPARE(sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &version, nullptr), SQLITE_OK);
        QCOMPARE(sqlite3_step(version), SQLITE_ROW);
        QCOMPARE(sqlite3_column_int(version, 0), Ledger::kSchemaVersion);
        sqlite3_finalize(version);
        sqlite3_stmt* index = nullptr; // a round's device mix reads by it
        QCOMPARE(sqlite3_prepare_v2(db, "SELECT count(*) FROM sqlite_master WHERE name = 'contributions_by_round'", -1,
                     &index, nullptr),
            SQLITE_OK);
        QCOMPARE(sqlite3_step(index), SQLITE_ROW);
        QCOMPARE(sqlite3_column_int(index, 0), 1);
        sqlite3_finalize(index);
        sqlite3_close(db);
    }

    void rejectionsAreKeptWithoutCommit()
    {
        const auto file = path("rejections.sqlite");
        {
            Ledger ledger = orFail(Ledger::open(file));
            QVERIFY(ledger.commitRound(roundOf(0)).ok());
            const ContributionRecord rejection{1, "mallory", 100, 5, 1.0, false, "norm 1e9 above bound", 777, 0, {}};
            QVERIFY(ledger.recordRejection(rejection).ok());
            ContributionRecord accepted = rejection;
            accepted.accepted = true;
            QVERIFY(!ledger.recordRejection(accepted).ok());
            // Round 1 never commits: the process goes away here.
        }
        Ledger ledger = orFail(Ledger::open(file));
        QCOMPARE(orFail(ledger.lastRound())->round, int64_t(0));
        auto mine = orFail(ledger.rejectionsOf("mallory"));
        QCOMPARE(mine.size(), std::size_t(1));
        QCOMPARE(mine[0].reason, std::string("norm 1e9 above bound"));
        QCOMPARE(mine[0].round, int64_t(1));
        QCOMPARE(orFail(ledger.rejectionsInRound(1)).size(), std::size_t(1));
        QCOMPARE(orFail(ledger.volunteerTotals("mallory")).rejected, int64_t(1));

        // The round then commits with the same rejection in its list: kept once.
        RoundCommit r1 = roundOf(1);
        r1.contributions.push_back(mine[0]);
        QVERIFY(ledger.commitRound(r1).ok());
        QCOMPARE(orFail(ledger.rejectionsInRound(1)).size(), std::size_t(2)); // mallory + key-bad
        QCOMPARE(orFail(ledger.lastRound())->rejected, int64_t(2));
        QCOMPARE(orFail(ledger.rejectionsOf("key-bad")).size(), std::size_t(2)); // rounds 0 and 1
    }

    void metricHistory()
    {
        Ledger ledger = orFail(Ledger::open(path("metrics.sqlite")));
        for (int64_t r = 0; r < 4; ++r)
            QVERIFY(ledger.commitRound(roundOf(r)).ok());
        QVERIFY(ledger.appendMetric({3500, 3, 12345, std::nullopt, std::nullopt, 42}).ok());
        const auto all = orFail(ledger.metricHistory(0));
        QCOMPARE(all.size(), std::size_t(5));
        QCOMPARE(all[1].round, int64_t(1));
        QCOMPARE(all[1].tokens, roundTokens(0) + roundTokens(1)); // project total
        QCOMPARE(all[1].volunteersOnline, int64_t(3));
        QVERIFY(all[1].valLoss);
        QCOMPARE(all[4].volunteersOnline, int64_t(42));
        QVERIFY(!all[4].trainLoss);
        QCOMPARE(orFail(ledger.metricHistory(3)).size(), std::size_t(2));
    }

    void badFiles_data()
    {
        QTest::addColumn<QString>("kind");
        QTest::addColumn<QString>("code");
        QTest::newRow("text file") << QStringLiteral("text") << QStringLiteral("ledger_corrupt");
        QTest::newRow("another program's database") << QStringLiteral("foreign") << QStringLiteral("ledger_foreign");
        QTest::newRow("newer schema") << QStringLiteral("newer") << QStringLiteral("ledger_version");
        QTest::newRow("damaged pages") << QStringLiteral("damaged") << QStringLiteral("ledger_corrupt");
    }

    void badFiles()
    {
        QFETCH(QString, kind);
        QFETCH(QString, code);
        const auto file = path("bad-" + kind.toStdString() + ".sqlite");
        if (kind == QLatin1String("text")) {
            testing::writeAll(file, std::string(4096, 'x'));
        } else if (kind == QLatin1String("foreign")) {
            sqlite3* db = nullptr;
            QCOMPARE(sqlite3_open(file.c_str(), &db), SQLITE_OK);
            QCOMPARE(sqlite3_exec(db, "CREATE TABLE photos(id INTEGER)", nullptr, nullptr, nullptr), SQLITE_OK);
            sqlite3_close(db);
        } else {
            {
                Ledger ledger = orFail(Ledger::open(file));
                for (int64_t r = 0; r < 50; ++r)
                    QVERIFY(ledger.commitRound(roundOf(r)).ok());
            }
            if (kind == QLatin1String("newer")) {
                sqlite3* db = nullptr;
                QCOMPARE(sqlite3_open(file.c_str(), &db), SQLITE_OK);
                QCOMPARE(sqlite3_exec(db, "PRAGMA user_version = 99", nullptr, nullptr, nullptr), SQLITE_OK);
                sqlite3_close(db);
            } else {
                // Garbage over every page but the first (the header stays valid).
                std::string bytes = testing::readAll(file);
                QVERIFY(bytes.size() > 8192);
                std::mt19937 random(1);
                for (std::size_t i = 4096; i < bytes.size(); ++i)
                    bytes[i] = char(random());
                testing::writeAll(file, bytes);
            }
        }
        auto ledger = Ledger::open(file);
        QVERIFY(!ledger.ok());
        QCOMPARE(QString::fromStdString(ledger.error().code), code);
        QVERIFY2(ledger.error().message.find(file.string()) != std::string::npos, ledger.error().message.c_str());
    }

    // A child process commits rounds in a loop and is SIGKILLed at a random
    // moment, several times. Every round it reported as committed is there,
    // and every round present is complete.
    void killDuringCommit()
    {
        const auto file = path("crash.sqlite");
        std::mt19937 random(42);
        int64_t reported = -1;
        for (int attempt = 0; attempt < 4; ++attempt) {
            QProcess child;
            QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
            env.insert(QString::fromLatin1(kChildVariable), QString::fromStdString(file.string()));
            child.setProcessEnvironment(env);
            child.start(QCoreApplication::applicationFilePath(), {});
            QVERIFY(child.waitForStarted());
            QVERIFY(child.waitForReadyRead(20000));
            QTest::qWait(int(50 + random() % 200));
            child.kill(); // SIGKILL
            QVERIFY(child.waitForFinished(20000));
            QCOMPARE(child.exitStatus(), QProcess::CrashExit);
            for (const QByteArray& line : child.readAllStandardOutput().split('\n')) {
                if (!line.isEmpty())
                    reported = std::max<int64_t>(reported, line.toLongLong());
            }

            Ledger ledger = orFail(Ledger::open(file));
            const auto last = orFail(ledger.lastRound());
            QVERIFY(last);
            QVERIFY2(last->round >= reported, "a round reported as committed was lost");
            QVERIFY(last->round <= reported + 1); // at most the one being committed
            int64_t total = 0;
            for (int64_t r = 0; r <= last->round; ++r) {
                const auto record = orFail(ledger.round(r));
                QVERIFY(record);
                QCOMPARE(record->tokens, roundTokens(r));
                QCOMPARE(record->accepted, r % 5 + 1);
                QCOMPARE(orFail(ledger.contributionsOfRound(r)).size(), std::size_t(r % 5 + 2));
                total += roundTokens(r);
            }
            QCOMPARE(last->totalTokens, total);
            QVERIFY(orFail(ledger.contributionsOfRound(last->round + 1)).empty());
            QCOMPARE(orFail(ledger.metricHistory(0)).size(), std::size_t(last->round + 1));
            QCOMPARE(orFail(ledger.dataProgress())->completedRanges, last->round % 10);
            reported = last->round;
        }
        QVERIFY2(reported >= 4, "the child committed too few rounds to mean anything");
    }
};

int main(int argc, char** argv)
{
    if (const char* file = std::getenv(kChildVariable))
        return runCommittingChild(file);
    QCoreApplication app(argc, argv);
    TestLedger test;
    return QTest::qExec(&test, argc, argv);
}

#include "tst_ledger.moc"
