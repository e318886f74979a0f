// The project's state folder: state and update files (round trip, damage,
// truncation), ProjectStore commits, retention, orphan cleanup after a crash
// between the state file and the ledger, and a committing process killed
// with SIGKILL.
#include "coordinator_fixtures.h"

#include "engine/diloco/aggregator.h"
#include "engine/diloco/codec.h"
#include "engine/diloco/outer_optimizer.h"
#include "net/coordinator/round_state.h"
#include "net/coordinator/state_store.h"

#include <QCoreApplication>
#include <QProcess>
#include <QTemporaryDir>
#include <QTest>

#include <algorithm>
#include <cstdio>
#include <random>
#include <set>
#include <stdexcept>

using namespace crowdtrain;
using namespace crowdtrain::coordinator;

namespace {

const char* const kChildVariable = "CT_STATE_CRASH_CHILD";

using testing::orFail;

std::vector<float> valuesOf(std::size_t n, float seed)
{
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i)
        v[i] = seed + 0.001f * float(i % 1000) - float(i % 7);
    return v;
}

// A tiny custom model: few parameters keep the files small.
ProjectSpec specIn(const std::filesystem::path& dir, int64_t nEmbd = 8)
{
    const std::string json = R"({"name": "store-test", "data": "data",
        "model": {"n_layer": 1, "n_head": 2, "n_embd": )"
        + std::to_string(nEmbd) + R"(, "block_size": 8, "vocab_size": 16},
        "inner": {"steps": 2, "batch_size": 2}, "round": {"deadline_seconds": 30}})";
    return orFail(parseProjectSpec(json, dir / "project.json"));
}

GlobalState stateOf(int64_t version, std::size_t p)
{
    return GlobalState{version, valuesOf(p, float(version)), valuesOf(p, 0.5f * float(version)),
        version == 0 ? std::vector<float>() : valuesOf(p, -1.0f), "rng-" + std::to_string(version), {}};
}

RoundCommit commitOf(int64_t round)
{
    RoundCommit c;
    c.record.round = round;
    c.record.closedAtMs = round * 1000;
    if (round > 0)
        c.contributions.push_back({round, "vol", 100, 5, 2.0, true, "", round * 1000, 0, {}});
    return c;
}

std::string updateOf(int64_t version)
{
    return std::string(100 + std::size_t(version), char('0' + version % 10));
}

int runCommittingChild(const char* dir)
{
    const ProjectSpec spec = specIn(dir);
    auto store = ProjectStore::open(spec, dir);
    if (!store)
        return 2;
    for (int64_t v = store->lastRound() ? store->lastRound()->version + 1 : 0;; ++v) {
        if (!store->commit(stateOf(v, store->parameterCount()), commitOf(v), v == 0 ? "" : updateOf(v)).ok())
            return 3;
        std::printf("%lld\n", static_cast<long long>(v));
        std::fflush(stdout);
    }
}

} // namespace

class TestStateStore : public QObject {
    Q_OBJECT

private:
    QTemporaryDir m_dir;

    std::filesystem::path path(const std::string& name) const { return m_dir.path().toStdString() + "/" + name; }

private slots:
    void stateFileRoundTrip()
    {
        const auto file = path("global-3.bin");
        const GlobalState state = stateOf(3, 1000);
        const WrittenState written = orFail(writeGlobalState(file, state));
        // theta in a file of its own (the one served and seeded), the rest here.
        QCOMPARE(std::filesystem::file_size(file), uint64_t(40 + 32 + 2 * 4 * 1000 + 5 + 32));
        QCOMPARE(std::filesystem::file_size(path("state-v3")), uint64_t(4 * 1000));
        QCOMPARE(written.bytes, uint64_t(4 * 1000 + 40 + 32 + 2 * 4 * 1000 + 5 + 32));
        QCOMPARE(written.paramsSha256, parametersSha256Hex(state.params));
        QCOMPARE(testing::readAll(path("state-v3")),
            std::string(reinterpret_cast<const char*>(state.params.data()), 4 * 1000));
        QCOMPARE(testing::readAll(file).substr(0, 8), std::string("CTGLOBAL"));
        const GlobalState back = orFail(readGlobalState(file, 1000));
        QCOMPARE(back.version, int64_t(3));
        QVERIFY(back.params == state.params);
        QCOMPARE(back.paramsSha256, written.paramsSha256);
        QVERIFY(back.momentum == state.momentum);
        QVERIFY(back.updateResidual == state.updateResidual);
        QCOMPARE(back.extra, state.extra);

        // Empty momentum and residual are written as zeros.
        GlobalState fresh{0, valuesOf(10, 1.0f), {}, {}, {}, {}};
        QVERIFY(writeGlobalState(path("fresh.bin"), fresh).ok());
        const GlobalState zeros = orFail(readGlobalState(path("fresh.bin")));
        QVERIFY(zeros.momentum == std::vector<float>(10, 0.0f));
        QVERIFY(zeros.updateResidual == std::vector<float>(10, 0.0f));
        fresh.momentum = {1.0f};
        QVERIFY(!writeGlobalState(path("bad-sizes.bin"), fresh).ok());
    }

    void damagedStateFiles_data()
    {
        QTest::addColumn<QString>("damage");
        QTest::addColumn<QString>("code");
        QTest::addColumn<QString>("message");
        QTest::newRow("truncated by one byte")
            << QStringLiteral("truncate1") << QStringLiteral("state_corrupt") << QStringLiteral("truncated or damaged");
        QTest::newRow("truncated header")
            << QStringLiteral("truncate30") << QStringLiteral("state_corrupt") << QStringLiteral("truncated header");
        QTest::newRow("flipped parameter bit")
            << QStringLiteral("flip") << QStringLiteral("state_corrupt") << QStringLiteral("checksum mismatch");
        QTest::newRow("wrong magic") << QStringLiteral("magic") << QStringLiteral("state_corrupt")
                                     << QStringLiteral("not a CTGLOBAL file");
        QTest::newRow("another model") << QStringLiteral("size") << QStringLiteral("state_mismatch")
                                       << QStringLiteral("holds 1000 parameters, the model has 999");
        QTest::newRow("flipped bit in theta's file")
            << QStringLiteral("theta") << QStringLiteral("state_corrupt") << QStringLiteral("checksum mismatch");
        QTest::newRow("theta's file truncated") << QStringLiteral("theta-truncated") << QStringLiteral("state_corrupt")
                                                << QStringLiteral("truncated or damaged");
        QTest::newRow("theta's file missing")
            << QStringLiteral("theta-missing") << QStringLiteral("state_corrupt") << QStringLiteral("missing");
    }

    void damagedStateFiles()
    {
        QFETCH(QString, damage);
        QFETCH(QString, code);
        QFETCH(QString, message);
        const auto file = path("damaged.bin");
        QVERIFY(writeGlobalState(file, stateOf(1, 1000)).ok());
        const bool theta = damage.startsWith(QLatin1String("theta"));
        const auto damaged = theta ? path("state-v1") : file;
        std::string bytes = testing::readAll(damaged);
        if (damage == QLatin1String("truncate1"))
            bytes.pop_back();
        else if (damage == QLatin1String("truncate30"))
            bytes.resize(30);
        else if (damage == QLatin1String("flip"))
            bytes[40 + 4 * 500] = char(bytes[40 + 4 * 500] ^ 0x10);
        else if (damage == QLatin1String("magic"))
            bytes[0] = 'X';
        else if (damage == QLatin1String("theta"))
            bytes[4 * 500] = char(bytes[4 * 500] ^ 0x10);
        else if (damage == QLatin1String("theta-truncated"))
            bytes.pop_back();
        if (damage == QLatin1String("theta-missing"))
            std::filesystem::remove(damaged);
        else
            testing::writeAll(damaged, bytes);
        auto read = readGlobalState(file, damage == QLatin1String("size") ? 999 : 1000);
        QVERIFY(!read.ok());
        QCOMPARE(QString::fromStdString(read.error().code), code);
        const QString text = QString::fromStdString(read.error().message);
        QVERIFY2(text.contains(message) && text.contains(QString::fromStdString(damaged.filename().string())),
            qPrintable(text));
    }

    void updateFileRoundTrip()
    {
        const auto file = path("update-5.bin");
        QVERIFY(writeUpdateFile(file, 5, 300, updateOf(5)).ok());
        QCOMPARE(orFail(readUpdateFile(file, 5, 300)), updateOf(5));
        QVERIFY(!readUpdateFile(file, 4, 300).ok());
        QVERIFY(!readUpdateFile(file, 5, 301).ok());
        std::string bytes = testing::readAll(file);
        bytes.back() = char(bytes.back() ^ 1);
        testing::writeAll(file, bytes);
        QCOMPARE(readUpdateFile(file, 5, 300).error().code, std::string("state_corrupt"));
    }

    void parametersHash()
    {
        // SHA-256 of the fp32 bytes of {0.0f}: four zero bytes.
        QCOMPARE(parametersSha256Hex(std::vector<float>{0.0f}),
            std::string("df3f619804a92fdb4057192dc43dd748ea778adc52bc498ce80524c014b81119"));
    }

    void commitsAndRetention()
    {
        const std::string dir = path("project").string();
        const ProjectSpec spec = specIn(dir);
        {
            ProjectStore store = orFail(ProjectStore::open(spec, dir));
            QVERIFY(!store.lastRound());
            QCOMPARE(store.loadLatest().error().code, std::string("no_state"));
            const uint64_t p = store.parameterCount();
            QCOMPARE(p, uint64_t(engine::parameterCount(spec.model)));
            QVERIFY(!store.commit(stateOf(1, p), commitOf(0), "").ok()); // version 0 first
            QVERIFY(!store.commit(stateOf(0, p), commitOf(0), "x").ok()); // version 0 has no update
            QVERIFY(!store.commit(stateOf(0, p - 1), commitOf(0), "").ok());
            for (int64_t v = 0; v <= 3; ++v)
                QVERIFY(store.commit(stateOf(v, p), commitOf(v), v == 0 ? "" : updateOf(v)).ok());
            QCOMPARE(store.lastRound()->version, int64_t(3));
            QCOMPARE(store.lastRound()->stateFile, std::string("state/global-3.bin"));
            QCOMPARE(store.lastRound()->updateFile, std::string("state/update-3.bin"));
            QVERIFY(!store.commit(stateOf(5, p), commitOf(4), updateOf(5)).ok()); // versions do not skip
        }
        // One state (theta and the optimizer's file) and the last update stay.
        std::set<std::string> files;
        for (const auto& entry : std::filesystem::directory_iterator(dir + "/state"))
            files.insert(entry.path().filename().string());
        QCOMPARE(files, (std::set<std::string>{"global-3.bin", "state-v3", "update-3.bin"}));

        ProjectStore store = orFail(ProjectStore::open(spec, dir));
        QVERIFY(store.removedAtOpen().empty());
        const GlobalState latest = orFail(store.loadLatest());
        QCOMPARE(latest.version, int64_t(3));
        QVERIFY(latest.params == stateOf(3, store.parameterCount()).params);
        QCOMPARE(latest.extra, std::string("rng-3"));
        QCOMPARE(orFail(store.readUpdate(3)), updateOf(3));
        QCOMPARE(store.readUpdate(2).error().code, std::string("no_update"));
        QCOMPARE(orFail(store.ledger().lastRound())->tokens, int64_t(100));
    }

    void orphansAreRemovedAtOpen()
    {
        const std::string dir = path("orphans").string();
        const ProjectSpec spec = specIn(dir);
        uint64_t p = 0;
        {
            ProjectStore store = orFail(ProjectStore::open(spec, dir));
            p = store.parameterCount();
            for (int64_t v = 0; v <= 2; ++v)
                QVERIFY(store.commit(stateOf(v, p), commitOf(v), v == 0 ? "" : updateOf(v)).ok());
        }
        // A crash after writing version 3's files but before the ledger named them.
        QVERIFY(writeGlobalState(dir + "/state/global-3.bin", stateOf(3, p)).ok());
        QVERIFY(writeUpdateFile(dir + "/state/update-3.bin", 3, p, updateOf(3)).ok());
        testing::writeAll(dir + "/state/.state-v3.torrent", "its torrent");
        testing::writeAll(dir + "/state/.global-4.bin.tmp-12-34", "half written");
        testing::writeAll(dir + "/state/notes.txt", "not ours");
        // What format 1 kept as the swarm's copy of theta.
        std::filesystem::create_directories(dir + "/swarm");
        testing::writeAll(dir + "/swarm/state-v2", "a copy");

        ProjectStore store = orFail(ProjectStore::open(spec, dir));
        QCOMPARE(store.removedAtOpen().size(), std::size_t(6));
        QVERIFY(!std::filesystem::exists(dir + "/state/global-3.bin"));
        QVERIFY(!std::filesystem::exists(dir + "/state/state-v3"));
        QVERIFY(!std::filesystem::exists(dir + "/swarm"));
        QVERIFY(std::filesystem::exists(dir + "/state/state-v2"));
        QVERIFY(!std::filesystem::exists(dir + "/state/update-3.bin"));
        QVERIFY(std::filesystem::exists(dir + "/state/notes.txt"));
        QCOMPARE(orFail(store.loadLatest()).version, int64_t(2));
        // The next commit of version 3 goes through normally.
        QVERIFY(store.commit(stateOf(3, p), commitOf(3), updateOf(3)).ok());
        QCOMPARE(orFail(store.loadLatest()).version, int64_t(3));
    }

    void damagedLatestStateIsAnError()
    {
        const std::string dir = path("damaged-latest").string();
        const ProjectSpec spec = specIn(dir);
        {
            ProjectStore store = orFail(ProjectStore::open(spec, dir));
            QVERIFY(store.commit(stateOf(0, store.parameterCount()), commitOf(0), "").ok());
        }
        const std::string file = dir + "/state/global-0.bin";
        std::string bytes = testing::readAll(file);
        bytes[100] = char(bytes[100] ^ 0xFF);
        testing::writeAll(file, bytes);
        ProjectStore store = orFail(ProjectStore::open(spec, dir));
        auto latest = store.loadLatest();
        QVERIFY(!latest.ok());
        QCOMPARE(latest.error().code, std::string("state_corrupt"));
        QVERIFY(latest.error().message.find("global-0.bin") != std::string::npos);
    }

    void folderBelongsToOneModel()
    {
        const std::string dir = path("one-model").string();
        QVERIFY(ProjectStore::open(specIn(dir), dir).ok());
        auto other = ProjectStore::open(specIn(dir, 16), dir);
        QVERIFY(!other.ok());
        QCOMPARE(other.error().code, std::string("state_mismatch"));
    }

    void dataPlanProgressSurvivesRestart()
    {
        const std::string dir = path("plan").string();
        testing::makeDataFolder(dir + "/data", 16, {400, 200});
        const ProjectSpec spec = specIn(dir); // a task is 2 * 2 * 8 + 1 = 33 tokens
        const engine::DataSet data = orFail(engine::openDataSet(spec.dataDir));
        std::vector<uint32_t> completed;
        {
            ProjectStore store = orFail(ProjectStore::open(spec, dir));
            DataPlan plan = orFail(store.restoreDataPlan(data));
            QCOMPARE(plan.rangeCount(), std::size_t(12 + 6));
            for (int i = 0; i < 5; ++i) {
                const Lease lease = *plan.lease("vol", 0);
                completed.push_back(lease.range);
                QVERIFY(plan.complete(lease.id).ok());
            }
            QVERIFY(plan.lease("vol", 0)); // leased, lost with the round
            RoundCommit commit = commitOf(0);
            commit.dataProgress = RoundCommit::DataProgress{
                int64_t(plan.epoch()), int64_t(plan.completedCount()), int64_t(plan.rangeCount()), plan.serialize()};
            QVERIFY(store.commit(stateOf(0, store.parameterCount()), commit, "").ok());
        }
        ProjectStore store = orFail(ProjectStore::open(spec, dir));
        DataPlan plan = orFail(store.restoreDataPlan(data));
        QCOMPARE(plan.completedCount(), std::size_t(5));
        QCOMPARE(plan.availableCount(), std::size_t(13));
        for (int i = 0; i < 13; ++i) {
            const Lease lease = *plan.lease("vol", 0);
            QCOMPARE(lease.epoch, uint64_t(0));
            QVERIFY(std::find(completed.begin(), completed.end(), lease.range) == completed.end());
        }
    }

    // Issue 41: a round close works in place (the average and the outer step
    // over the aggregate's sum, the momentum and residual where they are,
    // no copies). It makes what the whole-vector arithmetic makes, bit for
    // bit; and a close that fails after its files were written (an
    // exception at "close-written") puts the round back, so that the next
    // close makes the same version and momentum as one that never failed.
    void aCloseInPlaceIsExactAndAFailedOnePutsTheRoundBack()
    {
        struct Made {
            std::string thetaSha, update;
            std::vector<float> momentum;
        };
        std::vector<std::vector<float>> deltas;
        const auto closeIn = [&](const std::string& name, bool failFirst) {
            const auto dir = path(name);
            const ProjectSpec spec = specIn(dir);
            ProjectStore store = orFail(ProjectStore::open(spec, dir));
            const int64_t p = int64_t(store.parameterCount());
            RoundState round(spec, store, p);
            if (Status s = round.createVersionZero(valuesOf(std::size_t(p), 0.1f), std::nullopt, 0); !s)
                qFatal("version 0: %s", s.error().message.c_str());
            std::mt19937 rng(7);
            std::normal_distribution<float> normal(0.0f, 1e-3f);
            deltas.assign(3, std::vector<float>(std::size_t(p)));
            for (int i = 0; i < 3; ++i) { // the last from a new key: the capped part
                for (float& v : deltas[std::size_t(i)])
                    v = normal(rng);
                const auto payload = dir / ("payload-" + std::to_string(i));
                testing::writeAll(payload, diloco::encode(diloco::Codec::Int8, deltas[std::size_t(i)].data(), p));
                AcceptedSubmission a;
                a.record = ContributionRecord{1, "key-" + std::to_string(i), 100 + 50 * i, 5, 2.0, true, "", 1, 0, {}};
                a.fresh = i == 2;
                if (Status s = round.add(a, payload, diloco::Codec::Int8); !s)
                    qFatal("add: %s", s.error().message.c_str());
            }
            RoundState::CloseInput input;
            input.nowMs = 2;
            input.serviceBytes = "{}";
            if (failFirst) {
                bool thrown = false;
                try {
                    (void)round.computeClose(input, [](std::string_view where, int64_t) {
                        if (where == "close-written")
                            throw std::runtime_error("injected");
                    });
                } catch (const std::runtime_error&) {
                    thrown = true;
                }
                if (!thrown)
                    qFatal("the injected failure did not happen");
            }
            RoundState::Closed closed = orFail(round.computeClose(input));
            round.publishClose(closed);
            return Made{closed.written.paramsSha256, closed.update, round.momentum()};
        };
        const Made once = closeIn("in-place-once", false);
        const Made afterFailure = closeIn("in-place-failed", true);
        QCOMPARE(afterFailure.thetaSha, once.thetaSha);
        QVERIFY(afterFailure.update == once.update);
        QVERIFY(afterFailure.momentum == once.momentum);

        // The same arithmetic over whole vectors, as before issue 41.
        const int64_t p = int64_t(deltas[0].size());
        diloco::RoundAggregator established(p), fresh(p);
        QVERIFY(established.add(diloco::Codec::Int8, diloco::encode(diloco::Codec::Int8, deltas[0].data(), p), 100.0));
        QVERIFY(established.add(diloco::Codec::Int8, diloco::encode(diloco::Codec::Int8, deltas[1].data(), p), 150.0));
        QVERIFY(fresh.add(diloco::Codec::Int8, diloco::encode(diloco::Codec::Int8, deltas[2].data(), p), 200.0));
        std::vector<float> avg = *established.average();
        const std::vector<float> freshAvg = *fresh.average();
        const double we = 250, wn = 200, total = we + wn; // the fresh scale is 1 when nobody sets it
        for (std::size_t i = 0; i < avg.size(); ++i)
            avg[i] = float(we / total * double(avg[i]) + wn / total * double(freshAvg[i]));
        const ProjectSpec spec = specIn(path("in-place-once"));
        diloco::OuterNesterov outer(p, diloco::OuterOptions{spec.outer.lr, spec.outer.momentum, spec.outer.nesterov});
        const std::vector<float> u = outer.step(avg.data());
        std::vector<float> residual(std::size_t(p), 0.0f);
        QVERIFY(diloco::encode(diloco::Codec::Int8, u.data(), p, residual.data()) == once.update);
        QVERIFY(outer.momentum() == once.momentum);
        // theta_1 (written over theta_0's buffer) = theta_0 + decode(u).
        std::vector<float> theta = valuesOf(std::size_t(p), 0.1f);
        QVERIFY(diloco::applyUpdate(diloco::Codec::Int8, once.update, p, theta.data()));
        QCOMPARE(parametersSha256Hex(theta), once.thetaSha);
    }

    void killDuringCommit()
    {
        const std::string dir = path("crash").string();
        std::mt19937 random(7);
        int64_t reported = -1;
        for (int attempt = 0; attempt < 4; ++attempt) {
            QProcess child;
            QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
            env.insert(QString::fromLatin1(kChildVariable), QString::fromStdString(dir));
            child.setProcessEnvironment(env);
            child.start(QCoreApplication::applicationFilePath(), {});
            QVERIFY(child.waitForStarted());
            QVERIFY(child.waitForReadyRead(20000));
            QTest::qWait(int(50 + random() % 200));
            child.kill();
            QVERIFY(child.waitForFinished(20000));
            for (const QByteArray& line : child.readAllStandardOutput().split('\n')) {
                if (!line.isEmpty())
                    reported = std::max<int64_t>(reported, line.toLongLong());
            }
            ProjectStore store = orFail(ProjectStore::open(specIn(dir), dir));
            QVERIFY(store.lastRound());
            const int64_t version = store.lastRound()->version;
            QVERIFY2(version >= reported, "a version reported as committed was lost");
            const GlobalState state = orFail(store.loadLatest());
            QCOMPARE(state.version, version);
            QVERIFY(state.params == stateOf(version, store.parameterCount()).params);
            if (version > 0)
                QCOMPARE(orFail(store.readUpdate(version)), updateOf(version));
            int files = 0;
            for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir + "/state"))
                ++files;
            QVERIFY(files <= 3); // orphans and temporaries are gone
            reported = version;
        }
        QVERIFY(reported >= 4);
    }
};

int main(int argc, char** argv)
{
    if (const char* dir = std::getenv(kChildVariable))
        return runCommittingChild(dir);
    QCoreApplication app(argc, argv);
    TestStateStore test;
    return QTest::qExec(&test, argc, argv);
}

#include "tst_state_store.moc"
