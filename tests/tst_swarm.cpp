// The whole system on loopback: a crowdtrain-server process and several
// crowdtrain-worker processes training the small model char-level on Tiny
// Shakespeare. Churn is real: workers are SIGKILLed, join late, and the
// server itself is SIGKILLed and restarted on the same port.

#include "coordinator_process.h"
#include "worker_process.h"

#include "net/transport/client.h"
#include "net/transport/curve_keys.h"
#include "net/wire/messages.h"

#include <QTemporaryDir>
#include <fstream>
#include <sstream>

using namespace crowdtrain;
using namespace crowdtrain::testing;

namespace {

std::string slurp(const std::filesystem::path& file)
{
    std::ifstream in(file);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

// A client of our own, to read the project's metrics and ledger.
class Observer {
public:
    Observer(zmq::context_t& context, const ServerProcess& server)
    {
        auto keys = net::generateKeyPair();
        auto client = net::Client::connect(context, {server.endpoint, server.publicKey, *keys});
        if (!client)
            qFatal("observer: %s", client.error().message.c_str());
        m_client = std::move(*client);
    }
    std::vector<net::MetricRow> metrics()
    {
        auto reply = m_client->request<net::MetricsReply>(net::MetricsRequest{"tiny", 0, 4096}, 10000);
        return reply ? reply->rows : std::vector<net::MetricRow>{};
    }
    uint64_t version()
    {
        auto reply = m_client->request<net::ListProjectsReply>(net::ListProjectsRequest{}, 10000);
        return reply && !reply->projects.empty() ? reply->projects[0].version : 0;
    }
    std::map<std::string, net::ContributorRow> leaderboard()
    {
        std::map<std::string, net::ContributorRow> byName;
        auto reply = m_client->request<net::LeaderboardReply>(net::LeaderboardRequest{"tiny", 100}, 10000);
        if (reply)
            for (const auto& row : reply->rows)
                byName[row.displayName] = row;
        return byName;
    }
    bool waitForVersion(uint64_t atLeast, int timeoutMs)
    {
        return waitUntil([&] { return version() >= atLeast; }, timeoutMs);
    }
    // Tokens of every accepted submission (the ledger records one as it is
    // accepted) against those of the committed rounds: more means some
    // accepted work waits in the open round. The leaderboard is read first,
    // so a round committed in between can only make this false.
    bool acceptedWorkIsUncommitted()
    {
        uint64_t accepted = 0;
        for (const auto& [name, row] : leaderboard())
            accepted += row.tokens;
        auto reply = m_client->request<net::MetricsReply>(net::MetricsRequest{"tiny", 0, net::kMaxMetricRows}, 10000);
        if (!reply)
            return false;
        uint64_t committed = 0; // rows count the tokens up to their round's end
        for (const auto& row : reply->rows)
            committed = std::max(committed, row.tokens);
        return accepted > committed;
    }
    // True once `condition` holds, polled until timeoutMs have passed.
    static bool waitUntil(const std::function<bool()>& condition, int timeoutMs)
    {
        const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
        while (!condition()) {
            if (std::chrono::steady_clock::now() >= until)
                return false;
            QTest::qWait(100);
        }
        return true;
    }

private:
    std::unique_ptr<net::Client> m_client;
};

} // namespace

class TestSwarm : public QObject {
    Q_OBJECT

    QTemporaryDir m_dir;
    zmq::context_t m_context;
    std::filesystem::path m_data;

    std::filesystem::path dir() const { return m_dir.path().toStdString(); }

private slots:
    void initTestCase()
    {
        QVERIFY(m_dir.isValid());
        m_data = preparedShakespeare(dir());
    }

    // Three volunteers, one killed mid-run, one joining late: rounds keep
    // closing and the coordinator's validation loss falls.
    void swarmTrainsThroughChurn()
    {
        const auto spec = writeSpec(dir() / "a", m_data, SpecOptions{.innerSteps = 30, .tasksPerRound = 3});
        ServerProcess server;
        QVERIFY(server.start(spec, dir() / "a/state"));
        Observer observer(m_context, server);

        WorkerProcess w1, w2, victim;
        const auto summaryFile
            = [&](const char* name) { return QString::fromStdString((dir() / "a" / name).string()); };
        w1.start(server, m_data, dir() / "a/w1", "w1", 12, {QStringLiteral("--summary-file"), summaryFile("w1.json")});
        w2.start(server, m_data, dir() / "a/w2", "w2", 12);
        victim.start(server, m_data, dir() / "a/victim", "victim", 1000,
            {QStringLiteral("--summary-file"), summaryFile("victim.json")});
        QVERIFY2(observer.waitForVersion(2, 120000), server.stderrText().constData());
        victim.kill(); // SIGKILL, possibly mid-task
        // A killed run leaves the counts of its last phase behind.
        const auto killed = nlohmann::json::parse(slurp(dir() / "a/victim.json"), nullptr, false);
        QVERIFY(!killed.is_discarded());
        QVERIFY(killed.value("bytes_received", 0) > 0);
        const uint64_t atKill = observer.version();
        QVERIFY2(observer.waitForVersion(atKill + 2, 120000), "rounds stopped after a volunteer was killed");

        WorkerProcess joiner; // a fresh volunteer, behind by several versions
        // Up to 6 judged tasks: the direction gate may refuse a fresh
        // volunteer's first ones (its optimizer starts cold); see the note of
        // session 13.
        joiner.start(server, m_data, dir() / "a/joiner", "joiner", 6);
        const auto joined = joiner.finish(180000);
        QVERIFY(!joined.is_null());
        QVERIFY2(joined.value("accepted", 0) >= 1, joiner.log().right(3000).constData());
        const auto s1 = w1.finish(240000), s2 = w2.finish(240000);
        QVERIFY(!s1.is_null() && !s2.is_null());
        // A run that ends leaves its final summary in the file, as on stdout.
        const auto file1 = nlohmann::json::parse(slurp(dir() / "a/w1.json"), nullptr, false);
        QVERIFY(!file1.is_discarded());
        for (const char* key : {"tasks", "accepted", "tokens", "bytes_sent", "bytes_received"})
            QCOMPARE(file1.value(key, uint64_t(0)), s1.value(key, uint64_t(1)));

        // The coordinator evaluates each new version after publishing it: the
        // newest row may not have its loss yet.
        std::vector<net::MetricRow> rows;
        for (const auto& row : observer.metrics())
            if (row.valLoss)
                rows.push_back(row);
        QVERIFY(rows.size() >= 5);
        qInfo("validation loss: round %llu %.3f -> round %llu %.3f", (unsigned long long)rows.front().round,
            *rows.front().valLoss, (unsigned long long)rows.back().round, *rows.back().valLoss);
        QVERIFY(*rows.back().valLoss < *rows.front().valLoss - 0.5);
        const auto board = observer.leaderboard();
        QCOMPARE(board.at("w1").roundsAccepted, uint64_t(s1.value("accepted", -1)));
        QCOMPARE(board.at("joiner").roundsAccepted, uint64_t(joined.value("accepted", -1)));
        server.terminate();
    }

    // The sparse codec end to end: two volunteers send top-k messages, the
    // coordinator publishes sparse updates, and each volunteer applies them
    // to the bit (the state's SHA-256 after the update is checked; a
    // mismatch would fall back to a full download, which must not happen).
    void sparseCodecTrains()
    {
        const auto spec
            = writeSpec(dir() / "s", m_data, SpecOptions{.innerSteps = 20, .tasksPerRound = 2, .codec = "sparse"});
        ServerProcess server;
        QVERIFY(server.start(spec, dir() / "s/state"));
        Observer observer(m_context, server);
        WorkerProcess w1, w2;
        w1.start(server, m_data, dir() / "s/w1", "w1", 4);
        w2.start(server, m_data, dir() / "s/w2", "w2", 4);
        const auto s1 = w1.finish(240000), s2 = w2.finish(240000);
        QVERIFY(!s1.is_null() && !s2.is_null());
        const QByteArray why = QByteArray::fromStdString(s1.dump() + "\n" + s2.dump() + "\n") + w1.log().right(2500)
            + QByteArray("\n") + w2.log().right(2500);
        // Every task is judged. Under load a round's wrap-up can cut a task
        // to a few steps, and the norm gate may refuse it (CI saw 7 of 8
        // accepted once); a refusal of the payload itself (its size,
        // indices or values) is what this test must never see.
        const int accepted = s1.value("accepted", 0) + s2.value("accepted", 0);
        QVERIFY2(accepted + s1.value("rejected", 0) + s2.value("rejected", 0) == 8 && accepted >= 6, why.constData());
        for (const char* format : {"bad_shape", "bad_size", "bad_index", "non_finite", "checksum_mismatch"})
            QVERIFY2(!why.contains(format), why.constData());
        // A round can hold more than its 2 tasks (an established key takes
        // a task beside a new key's: 2 + 3 + 3 under load), so 6 to 8
        // accepted tasks close at least 2 rounds, not accepted / 2.
        QVERIFY2(observer.waitForVersion(2, 30000), server.stderrText().constData());
        int applied = 0;
        for (WorkerProcess* w : {&w1, &w2}) {
            const QByteArray log = w->log();
            applied += log.count("applied the update");
            QVERIFY2(!log.contains("not usable"), log.right(3000).constData());
            QVERIFY2(log.contains("bytes uploaded"), log.right(3000).constData());
            // Joined at version 0: theta_0 from the seed, no state download.
            QVERIFY2(log.contains("version 0 built from the project's seed"), log.left(3000).constData());
            QVERIFY2(!log.contains("downloading state"), log.left(3000).constData());
        }
        QVERIFY2(applied >= 3, QByteArray::number(applied).constData());
        std::vector<net::MetricRow> rows;
        for (const auto& row : observer.metrics())
            if (row.valLoss)
                rows.push_back(row);
        QVERIFY(rows.size() >= 2); // round 0 and the closed rounds but maybe the newest
        qInfo("sparse: validation loss round %llu %.3f -> round %llu %.3f", (unsigned long long)rows.front().round,
            *rows.front().valLoss, (unsigned long long)rows.back().round, *rows.back().valLoss);
        QVERIFY(*rows.back().valLoss < *rows.front().valLoss - 0.3);

        // Started again on their folders, both pick up their theta and their
        // error-feedback buffer (the residual) where they left them.
        WorkerProcess again1, again2;
        again1.start(server, m_data, dir() / "s/w1", "w1", 1);
        again2.start(server, m_data, dir() / "s/w2", "w2", 1);
        QVERIFY(!again1.finish(240000).is_null() && !again2.finish(240000).is_null());
        for (WorkerProcess* w : {&again1, &again2}) {
            const QByteArray log = w->log();
            QVERIFY2(log.contains("found the residual (error feedback) on disk"), log.left(3000).constData());
            QVERIFY2(log.contains("found theta version"), log.left(3000).constData());
            QVERIFY2(!log.contains("ignoring the"), log.left(3000).constData());
        }
        server.terminate();
    }

    // Overlap: each worker leases the next round's task as soon as its own
    // is trained and trains it from its last weights while that one uploads
    // and the round closes, then moves its progress onto the new version;
    // every task is accepted and the loss falls.
    void overlapTrainsTheNextRoundsTask()
    {
        const auto spec = writeSpec(dir() / "o", m_data, SpecOptions{.innerSteps = 100, .tasksPerRound = 2});
        ServerProcess server;
        QVERIFY(server.start(spec, dir() / "o/state"));
        Observer observer(m_context, server);
        WorkerProcess w1, w2;
        w1.start(server, m_data, dir() / "o/w1", "w1", 4, {QStringLiteral("--overlap")});
        w2.start(server, m_data, dir() / "o/w2", "w2", 4, {QStringLiteral("--overlap")});
        const auto s1 = w1.finish(240000), s2 = w2.finish(240000);
        QVERIFY(!s1.is_null() && !s2.is_null());
        // Every task is judged; a task trained one round stale may be refused
        // by the direction gate (bench/RESULTS.md: overlap's cost), rarely.
        QCOMPARE(
            s1.value("accepted", 0) + s2.value("accepted", 0) + s1.value("rejected", 0) + s2.value("rejected", 0), 8);
        QVERIFY(s1.value("accepted", 0) + s2.value("accepted", 0) >= 5);
        QVERIFY2(observer.waitForVersion(3, 30000), server.stderrText().constData());
        int ahead = 0;
        for (WorkerProcess* w : {&w1, &w2}) {
            const QByteArray log = w->log();
            ahead += log.count("leased ahead");
            // Only a refusal may cost a task: the coordinator then takes an
            // ahead task back for the open round's work; nothing else drops one.
            for (const QByteArray& line : log.split('\n'))
                QVERIFY2(!line.contains("dropped") || line.contains("took the task back"), line.constData());
        }
        QVERIFY2(ahead >= 4, QByteArray(w1.log().right(4000) + "\n----\n" + w2.log().right(2500)).constData());
        std::vector<net::MetricRow> rows;
        for (const auto& row : observer.metrics())
            if (row.valLoss)
                rows.push_back(row);
        QVERIFY(rows.size() >= 4);
        QVERIFY(*rows.back().valLoss < *rows.front().valLoss - 0.3);
        server.terminate();
    }

    // kill -9 of the server mid-run: workers reconnect to the restarted
    // server by themselves and go on with their tasks, and every submission
    // a worker saw accepted is in the ledger. A submit whose reply died with
    // the server may have been accepted all the same (a submit is not
    // repeatable): the worker counts it as unconfirmed, never as accepted.
    void serverKilledAndRestartedLosesNothingAccepted()
    {
        const auto spec = writeSpec(dir() / "b", m_data, SpecOptions{.innerSteps = 20, .tasksPerRound = 4});
        ServerProcess server;
        QVERIFY(server.start(spec, dir() / "b/state"));
        const std::string endpoint = server.endpoint;
        Observer before(m_context, server);
        WorkerProcess w1, w2;
        w1.start(server, m_data, dir() / "b/w1", "w1", 40);
        w2.start(server, m_data, dir() / "b/w2", "w2", 40);
        QVERIFY(before.waitForVersion(1, 120000));
        // Into the next round: some submissions accepted, not committed.
        QVERIFY2(Observer::waitUntil([&] { return before.acceptedWorkIsUncommitted(); }, 120000),
            "no submission was accepted after the first round closed");
        QVERIFY2(w1.running() && w2.running(), "the workers were done before the kill: give them more tasks");
        const qsizetype logged1 = w1.log().size(), logged2 = w2.log().size();
        server.kill();
        // The server stays down until both workers have seen it gone (a
        // missed heartbeat or an unanswered request while joined, a failed
        // join otherwise).
        const auto noticed = [](WorkerProcess& w, qsizetype from) {
            const QByteArray since = w.log().mid(from);
            return since.contains("lost the coordinator") || since.contains("cannot join");
        };
        QVERIFY2(Observer::waitUntil([&] { return noticed(w1, logged1) && noticed(w2, logged2); }, 60000),
            QByteArray(w1.log().mid(logged1).right(1500) + "\n---\n" + w2.log().mid(logged2).right(1500)).constData());
        ServerProcess restarted;
        QVERIFY(restarted.start(spec, dir() / "b/state", 300, endpoint));
        QCOMPARE(restarted.publicKey, server.publicKey); // the same key pair, from the state folder
        const auto s1 = w1.finish(300000), s2 = w2.finish(300000);
        QVERIFY(!s1.is_null() && !s2.is_null());
        // Their open tasks survived the restart: nothing they trained was
        // refused as unknown.
        for (WorkerProcess* w : {&w1, &w2}) {
            const QByteArray log = w->log();
            const qsizetype at = log.indexOf("unknown_task");
            QVERIFY2(at < 0, log.mid(std::max<qsizetype>(0, at - 2500), 3000).constData());
        }
        // The ledger records a submission as it accepts it (the leaderboard
        // counts the open round's too): with both workers done, it holds all
        // it will ever hold of theirs.
        Observer after(m_context, restarted);
        const auto board = after.leaderboard();
        for (const auto& [name, summary] : {std::pair{"w1", s1}, std::pair{"w2", s2}}) {
            const uint64_t inLedger = board.at(name).roundsAccepted;
            const auto accepted = summary.value("accepted", uint64_t(0));
            const auto unconfirmed = summary.value("unconfirmed", uint64_t(0));
            QVERIFY2(inLedger >= accepted && inLedger <= accepted + unconfirmed,
                qPrintable(QStringLiteral("%1: %2 in the ledger, %3 accepted + %4 unconfirmed by the worker")
                               .arg(QString::fromUtf8(name))
                               .arg(inLedger)
                               .arg(accepted)
                               .arg(unconfirmed)));
        }
        restarted.terminate();
    }
};

QTEST_GUILESS_MAIN(TestSwarm)
#include "tst_swarm.moc"
