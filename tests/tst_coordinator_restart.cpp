// The coordinator across crashes and restarts: task ids never reused, open
// tasks and their uploads kept, a damaged pending record set aside, the
// norm gate's memory, and a SIGKILL anywhere in a round's close or in an
// acceptance losing nothing accepted (the restarted server's version equals
// the reference run's, bit for bit). Each case runs crowdtrain-server
// processes of its own on loopback.

// libtorch first (through the harness): Qt's `slots` macro breaks its headers.
#include "coordinator_harness.h"

#include <QTemporaryDir>

using namespace crowdtrain;
using namespace crowdtrain::testing;

class TestCoordinatorRestart : public QObject, public CoordinatorHarness {
    Q_OBJECT

    std::string m_closeReferenceSha; // theta_1 of aCrashAnywhereInTheCloseLosesNothingAccepted's reference

private slots:
    void initTestCase() { QVERIFY(prepare(false)); }

    // Task ids are only committed with a round; ids handed out after the last
    // commit must still never be handed out again after a crash, or an old
    // upload could pass for work on a new task.
    void taskIdsAreNeverReusedAfterARestart()
    {
        const std::filesystem::path dir = std::filesystem::path(m_dir.path().toStdString()) / "restart";
        const auto spec = writeSpec(
            dir, std::filesystem::path(m_dir.path().toStdString()) / "data", SpecOptions{.tasksPerRound = 4});
        std::set<uint64_t> seen;
        for (int life = 0; life < 3; ++life) {
            ServerProcess server;
            QVERIFY(server.start(spec, dir / "state"));
            // One new volunteer per life (the earlier ones' tasks stay open).
            Volunteer v = join("v" + std::to_string(life), &server);
            const uint64_t id = task(v).taskId;
            QVERIFY2(seen.insert(id).second, ("task id " + std::to_string(id) + " handed out twice").c_str());
            server.kill(); // SIGKILL: no round was committed
        }
        QCOMPARE(seen.size(), std::size_t(3));
    }

    // A restart keeps the open round's tasks: the same ids, ranges and
    // holders, and the chunks already uploaded; nobody has to train again.
    void openTasksSurviveARestart()
    {
        const std::filesystem::path root = m_dir.path().toStdString();
        const auto spec = writeSpec(root / "open", root / "data", SpecOptions{.tasksPerRound = 4});
        auto server = std::make_unique<ServerProcess>();
        QVERIFY(server->start(spec, root / "open/state"));
        const auto keysA = net::generateKeyPair(), keysB = net::generateKeyPair();
        QVERIFY(keysA && keysB);
        Volunteer a = join("a", server.get(), *keysA), b = join("b", server.get(), *keysB);
        const net::Task ta = task(a), tb = task(b);
        const int64_t n = int64_t(net::manifestElements(a.joined.manifest));
        const auto delta = randomDelta(n, 1e-3f, 5);
        const std::string payload = diloco::encode(diloco::Codec::Int8, delta.data(), n);
        QVERIFY(payload.size() <= a.joined.chunkBytes); // one chunk: uploaded whole before the kill
        auto up = a.client->request<net::UploadChunkReply>(
            net::UploadChunkRequest{"tiny", a.joined.session, ta.taskId, 0, payload});
        QVERIFY(up);
        server->kill();

        ServerProcess restarted;
        QVERIFY(restarted.start(spec, root / "open/state"));
        Volunteer a2 = join("a", &restarted, *keysA), b2 = join("b", &restarted, *keysB);
        QCOMPARE(task(a2).shards, ta.shards);
        QCOMPARE(task(a2).taskId, ta.taskId);
        QCOMPARE(task(b2).taskId, tb.taskId);
        // a's chunk is still there: the server asks for the next one.
        auto again = a2.client->request<net::UploadChunkReply>(
            net::UploadChunkRequest{"tiny", a2.joined.session, ta.taskId, 0, payload});
        QVERIFY(again);
        QCOMPARE(again->nextIndex, uint64_t(1));
        QCOMPARE(again->receivedBytes, uint64_t(payload.size()));
        const uint64_t tokens = 20 * 8 * 32;
        net::SubmitRequest s{"tiny", a2.joined.session, ta.taskId, ta.round, ta.version, tokens, 1000, 3.5,
            a2.joined.codec, uint64_t(n), payload.size(), 1, net::sha256Hex(payload)};
        auto accepted = a2.client->request<net::SubmitReply>(s, 20000);
        QVERIFY2(accepted, accepted ? "" : accepted.error().message.c_str());
        // Its own payload: a copy of a's would be refused (duplicate_payload).
        const auto deltaB = randomDelta(n, 1e-3f, 6);
        auto acceptedB = submit(b2, tb, diloco::encode(diloco::Codec::Int8, deltaB.data(), n), tokens);
        QVERIFY2(acceptedB, acceptedB ? "" : acceptedB.error().message.c_str());
        // The restored tasks' data is not handed out again.
        Volunteer c = join("c", &restarted);
        const net::Task tc = task(c);
        QVERIFY(tc.taskId != ta.taskId && tc.taskId != tb.taskId);
        QVERIFY(tc.shards != ta.shards && tc.shards != tb.shards);
        restarted.kill();
    }

    // A damaged record of an accepted submission (pending/*.json) is set
    // aside with a notice at start-up; the server starts and the open
    // round goes on with the records that are sound.
    void aDamagedPendingRecordIsSetAside()
    {
        const std::filesystem::path root = m_dir.path().toStdString();
        const auto spec = writeSpec(root / "damaged", root / "data", SpecOptions{.tasksPerRound = 3});
        std::filesystem::path pending;
        const uint64_t tokens = 20 * 8 * 32;
        {
            ServerProcess server;
            QVERIFY(server.start(spec, root / "damaged/state"));
            Volunteer a = join("a", &server), b = join("b", &server);
            const int64_t n = int64_t(net::manifestElements(a.joined.manifest));
            for (auto* v : {&a, &b}) {
                const auto delta = randomDelta(n, 1e-3f, v == &a ? 31 : 32);
                auto r = submit(*v, task(*v), diloco::encode(diloco::Codec::Int8, delta.data(), n), tokens);
                QVERIFY2(r, r ? "" : r.error().message.c_str());
            }
            server.kill();
        }
        for (const auto& entry : std::filesystem::recursive_directory_iterator(root / "damaged/state"))
            if (entry.is_directory() && entry.path().filename() == "pending")
                pending = entry.path();
        QVERIFY(!pending.empty());
        std::vector<std::filesystem::path> records;
        for (const auto& entry : std::filesystem::directory_iterator(pending))
            if (entry.path().extension() == ".json")
                records.push_back(entry.path());
        QCOMPARE(records.size(), std::size_t(2));
        std::sort(records.begin(), records.end());
        // The first keeps its round but loses the type of a field.
        auto record = nlohmann::json::parse(readAll(records[0]));
        record["tokens"] = "many";
        std::ofstream(records[0], std::ios::trunc) << record.dump();

        ServerProcess restarted;
        QVERIFY(restarted.start(spec, root / "damaged/state"));
        Volunteer c = join("c", &restarted);
        QVERIFY(task(c).taskId != 0); // it serves
        restarted.terminate();
        const QString said = QString::fromUtf8(restarted.stderrText());
        QVERIFY2(said.contains(QStringLiteral("could not be replayed")), qPrintable(said));
        QVERIFY(!std::filesystem::exists(records[0]));
        QVERIFY(std::filesystem::exists(records[1]));
        int setAside = 0;
        for (const auto& entry : std::filesystem::directory_iterator(pending))
            setAside += entry.path().filename().string().find(".bad-") != std::string::npos;
        QCOMPARE(setAside, 2); // the record and its payload, kept for a person
    }

    // The norm gate compares a round's submissions with the last round's
    // accepted norms; those are kept with the committed state, so a restart
    // does not open the gate to an outsized first submission.
    void normGateRemembersTheLastRoundAcrossARestart()
    {
        const std::filesystem::path root = m_dir.path().toStdString();
        const auto spec = writeSpec(root / "gate", root / "data", SpecOptions{.tasksPerRound = 2});
        const uint64_t tokens = 20 * 8 * 32;
        {
            ServerProcess server;
            QVERIFY(server.start(spec, root / "gate/state"));
            Volunteer a = join("a", &server), b = join("b", &server);
            const int64_t n = int64_t(net::manifestElements(a.joined.manifest));
            for (auto* v : {&a, &b}) {
                const auto delta = randomDelta(n, 1e-3f, v == &a ? 11 : 12);
                auto r = submit(*v, task(*v), diloco::encode(diloco::Codec::Int8, delta.data(), n), tokens);
                QVERIFY2(r, r ? "" : r.error().message.c_str());
            }
            bool closed = false;
            for (int i = 0; i < 100 && !closed; ++i, QTest::qWait(50)) {
                auto list = a.client->request<net::ListProjectsReply>(net::ListProjectsRequest{});
                closed = list && !list->projects.empty() && list->projects[0].version == 1;
            }
            QVERIFY(closed);
            server.kill();
        }
        ServerProcess restarted;
        QVERIFY(restarted.start(spec, root / "gate/state"));
        Volunteer c = join("c", &restarted);
        const int64_t n = int64_t(net::manifestElements(c.joined.manifest));
        // 10x the last round's norms, well under the absolute ceiling.
        const auto outsized = randomDelta(n, 1e-2f, 13);
        auto r = submit(c, task(c), diloco::encode(diloco::Codec::Int8, outsized.data(), n), tokens);
        QVERIFY(!r);
        QCOMPARE(r.error().code, std::string("norm_out_of_bounds"));
        restarted.kill();
    }

    // A round's close runs off the loop (aggregate, files, the ledger's
    // commit on the worker, hashes; then the switch on the loop; then
    // evaluation and checkpoint). The server killed
    // at any of those points, then restarted, makes the same next version
    // as one never killed: every accepted submission is in it, bit for bit.
    void aCrashAnywhereInTheCloseLosesNothingAccepted_data()
    {
        QTest::addColumn<QString>("point");
        QTest::newRow("no crash (the reference)") << QString();
        for (const char* point : {"close-begun", "close-written", "close-committed", "close-published", "evaluate"})
            QTest::newRow(point) << QString::fromLatin1(point);
    }

    void aCrashAnywhereInTheCloseLosesNothingAccepted()
    {
        QFETCH(QString, point);
        const std::filesystem::path root = m_dir.path().toStdString();
        const std::string name = point.isEmpty() ? std::string("reference") : point.toStdString();
        const auto spec
            = writeSpec(root / ("crash-" + name), root / "data", SpecOptions{.tasksPerRound = 2, .checkpointEvery = 1});
        const auto state = root / ("crash-" + name) / "state";
        const uint64_t tokens = 20 * 8 * 32;
        {
            ServerProcess server;
            if (!point.isEmpty())
                server.setEnvironment(QStringLiteral("CROWDTRAIN_TEST_CRASH_AT"), point);
            QVERIFY(server.start(spec, state));
            Volunteer a = join("a", &server), b = join("b", &server);
            const int64_t n = int64_t(net::manifestElements(a.joined.manifest));
            for (auto* v : {&a, &b}) {
                const auto delta = randomDelta(n, 1e-3f, v == &a ? 61 : 62);
                auto r = submit(*v, task(*v), diloco::encode(diloco::Codec::Int8, delta.data(), n), tokens);
                QVERIFY2(r, r ? "" : r.error().message.c_str());
            }
            if (point.isEmpty()) {
                QVERIFY(QTest::qWaitFor([&] { return heartbeat(a, 0).version == 1; }, 20000));
                m_closeReferenceSha = join("reader", &server).joined.stateSha256;
                server.terminate();
                return;
            }
            QVERIFY2(server.waitForExit(30000), "the server did not reach the crash point");
            QVERIFY(server.stderrText().contains(QByteArray("crashing at ").append(point.toUtf8())));
        }
        QVERIFY2(!m_closeReferenceSha.empty(), "the reference row runs first");
        ServerProcess restarted;
        QVERIFY(restarted.start(spec, state));
        Volunteer reader = join("reader", &restarted);
        QVERIFY(QTest::qWaitFor([&] { return heartbeat(reader, 0).version == 1; }, 20000));
        const Volunteer after = join("reader-2", &restarted);
        QCOMPARE(after.joined.version, uint64_t(1));
        QCOMPARE(after.joined.stateSha256, m_closeReferenceSha);
        // The round's evaluation and checkpoint are made again when the
        // crash lost them.
        QVERIFY(QTest::qWaitFor(
            [&] {
                auto list = reader.client->request<net::ListCheckpointsReply>(net::ListCheckpointsRequest{"tiny"});
                return list && !list->checkpoints.empty() && list->checkpoints.back().round == 1
                    && list->checkpoints.back().valLoss;
            },
            30000));
        restarted.terminate();
    }

    // An accepted submission is made durable on the project's worker, and
    // acknowledged after. The server killed there, before or after its
    // files, ledger row and sum, then restarted: the volunteer's submit sent
    // again is accepted (once), and the round closes to the same version
    // as aCrashAnywhereInTheCloseLosesNothingAccepted's reference.
    void aCrashWhileAcceptingLosesNothing_data()
    {
        QTest::addColumn<QString>("point");
        QTest::newRow("accept-begun") << QStringLiteral("accept-begun");
        QTest::newRow("accept-durable") << QStringLiteral("accept-durable");
    }

    void aCrashWhileAcceptingLosesNothing()
    {
        QFETCH(QString, point);
        QVERIFY2(!m_closeReferenceSha.empty(), "aCrashAnywhereInTheCloseLosesNothingAccepted's reference runs first");
        const std::filesystem::path root = m_dir.path().toStdString();
        const auto spec = writeSpec(root / ("accept-crash-" + point.toStdString()), root / "data",
            SpecOptions{.tasksPerRound = 2, .checkpointEvery = 1});
        const auto state = root / ("accept-crash-" + point.toStdString()) / "state";
        const uint64_t tokens = 20 * 8 * 32;
        const net::CurveKeyPair aKeys = orFail(net::generateKeyPair());
        net::SubmitRequest sent;
        {
            ServerProcess server;
            server.setEnvironment(QStringLiteral("CROWDTRAIN_TEST_CRASH_AT"), point);
            QVERIFY(server.start(spec, state));
            Volunteer a = join("a", &server, aKeys);
            const int64_t n = int64_t(net::manifestElements(a.joined.manifest));
            const auto delta = randomDelta(n, 1e-3f, 61);
            auto r = submit(
                a, task(a), diloco::encode(diloco::Codec::Int8, delta.data(), n), tokens,
                [&](net::SubmitRequest& s) { sent = s; }, 2000);
            QVERIFY2(!r, "the submit was answered before the crash point");
            QVERIFY2(server.waitForExit(30000), "the server did not reach the crash point");
            QVERIFY(server.stderrText().contains(QByteArray("crashing at ").append(point.toUtf8())));
        }
        ServerProcess restarted;
        QVERIFY(restarted.start(spec, state));
        Volunteer a = join("a", &restarted, aKeys);
        sent.session = a.joined.session;
        for (int again = 0; again < 2; ++again) { // its answer, and the answer to a repeat
            auto r = a.client->request<net::SubmitReply>(sent, 20000);
            QVERIFY2(r, r ? "" : r.error().message.c_str());
            QCOMPARE(r->round, uint64_t(1));
        }
        Volunteer b = join("b", &restarted);
        const int64_t n = int64_t(net::manifestElements(b.joined.manifest));
        const auto delta = randomDelta(n, 1e-3f, 62);
        auto r = submit(b, task(b), diloco::encode(diloco::Codec::Int8, delta.data(), n), tokens);
        QVERIFY2(r, r ? "" : r.error().message.c_str());
        QVERIFY(QTest::qWaitFor([&] { return heartbeat(b, 0).version == 1; }, 20000));
        QCOMPARE(join("reader", &restarted).joined.stateSha256, m_closeReferenceSha);
        restarted.terminate();
    }
};

QTEST_GUILESS_MAIN(TestCoordinatorRestart)
#include "tst_coordinator_restart.moc"
