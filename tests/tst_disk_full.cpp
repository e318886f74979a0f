// The coordinator on a full disk (issue 43, "Disk full was never tested"),
// as a process with its state folder on a small tmpfs the test fills and
// frees: a round close that cannot write the next version leaves the round
// open (its accepted submissions in pending/, the ledger at the last
// version), logs one clear line and goes on once space returns, also across
// a restart; a checkpoint that cannot be written is reported failed without
// leftovers while the round's version stays published, and the next one
// works; an upload or a submit that cannot be stored is refused with a clear
// error and works when sent again. And the volunteer's side: a checkpoint
// download or a state download into a full data folder waits with a clear
// error, what was there untouched, and completes once space returns. Skipped, with
// its reason, unless root.

// libtorch's headers before Qt's: Qt's `slots` macro breaks them.
#include "net/daemon/checkpoints.h"
#include "net/daemon/hub_link.h"

#include "coordinator_process.h"
#include "protocol_client.h"
#include "small_disk.h"
#include "worker_process.h"

#include "engine/diloco/codec.h"

#include "net/transport/curve_keys.h"

#include <QTemporaryDir>
#include <mutex>

using namespace crowdtrain;
using namespace crowdtrain::testing;

namespace {

constexpr uint64_t kTaskTokens = 20 * 8 * 32; // the test spec's H * B * T

std::string int8Payload(int64_t elements, uint64_t seed)
{
    const std::vector<float> delta = randomDelta(elements, 1e-3f, seed);
    return diloco::encode(diloco::Codec::Int8, delta.data(), elements);
}

int count(const QByteArray& text, const char* what)
{
    return int(text.count(what));
}

std::string fileText(const std::filesystem::path& file)
{
    std::ifstream in(file, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

std::vector<std::string> namesIn(const std::filesystem::path& dir)
{
    std::vector<std::string> names;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec))
        names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
}

// In a project of one task a round: `v` trains and submits `rounds` rounds
// in a row, each closed before the next. Whether all closed.
bool closeRoundsAlone(ProtocolVolunteer& v, uint64_t rounds)
{
    for (uint64_t version = 0; version < rounds; ++version) {
        auto t = askForTask(v, version);
        if (!t)
            return false;
        auto r = uploadAndSubmit(
            v, *t, int8Payload(int64_t(net::manifestElements(v.joined.manifest)), 1 + version), kTaskTokens);
        if (!r) {
            qWarning("submit at version %llu: %s", static_cast<unsigned long long>(version), r.error().message.c_str());
            return false;
        }
        if (!QTest::qWaitFor([&] { return projectVersion(v) == version + 1; }, 30000))
            return false;
    }
    return true;
}

} // namespace

#define REQUIRE_SMALL_DISK(disk, dir, bytes)                                                                           \
    do {                                                                                                               \
        if (auto why = SmallDisk::whyNot())                                                                            \
            QSKIP(why->c_str());                                                                                       \
        if (auto refused = (disk).mount((dir), (bytes)))                                                               \
            QSKIP(refused->c_str());                                                                                   \
    } while (false)

class TestDiskFull : public QObject {
    Q_OBJECT

    QTemporaryDir m_dir;
    zmq::context_t m_context;
    std::filesystem::path m_data;

    std::filesystem::path root() const { return m_dir.path().toStdString(); }

    ProtocolVolunteer join(
        const ServerProcess& server, const std::string& name, std::optional<net::CurveKeyPair> identity = std::nullopt)
    {
        return joinProject(m_context, server.endpoint, server.publicKey, "tiny", name, identity);
    }

    static int64_t elements(const ProtocolVolunteer& v) { return int64_t(net::manifestElements(v.joined.manifest)); }

private slots:
    void initTestCase()
    {
        QVERIFY(m_dir.isValid());
        m_data = preparedText(root()); // not on a small disk
    }

    // A close that finds no room for the next version's files: the round
    // stays open with its accepted submission on disk, the server says so
    // once (naming the file) and answers on; killed and restarted on the
    // full disk it starts from version 0 again; once space returns the
    // close succeeds and leaves only the new version's files.
    void fullDiskDuringACloseKeepsTheRoundOpen()
    {
        const auto dir = root() / "close";
        SmallDisk disk;
        REQUIRE_SMALL_DISK(disk, dir / "state", 4u << 20);
        const auto spec = writeSpec(dir, m_data, SpecOptions{.tasksPerRound = 1, .checkpointEvery = 100});
        ServerProcess server;
        QVERIFY(server.start(spec, dir / "state", 1000));
        const auto identity = *net::generateKeyPair();
        auto v = join(server, "v", identity);
        auto t = askForTask(v, 0);
        QVERIFY(t);
        const std::string payload = int8Payload(elements(v), 1);
        uploadPayload(v, *t, payload);
        // Room for the submit's record and ledger row, none for theta_1 (4 P bytes).
        disk.fill(48u << 10);
        QVERIFY(uint64_t(4 * elements(v)) > disk.freeBytes() + (16u << 10));
        auto accepted = v.client->request<net::SubmitReply>(submitRequestFor(v, *t, payload, kTaskTokens), 20000);
        QVERIFY2(accepted, accepted ? "" : accepted.error().message.c_str());

        QByteArray log;
        auto failures = [&] {
            log += server.stderrText();
            return count(log, "not closed");
        };
        QVERIFY2(QTest::qWaitFor([&] { return failures() >= 1; }, 20000), log.constData());
        // The file named is theta_1 itself, not a temporary name.
        QVERIFY2(log.contains(QByteArray::fromStdString(
                     "cannot write " + (dir / "state/tiny/state/state-v1").string() + ": No space left on device")),
            log.constData());
        // Tried again in the background, not logged again and again.
        QVERIFY2(!QTest::qWaitFor([&] { return failures() >= 2; }, 3000), log.constData());
        QCOMPARE(projectVersion(v), uint64_t(0));
        QCOMPARE(join(server, "w").joined.version, uint64_t(0)); // it answers on
        const auto pending = namesIn(dir / "state/tiny/pending");
        QCOMPARE(pending.size(), std::size_t(2)); // the accepted payload and its record
        QVERIFY2(pending[0].starts_with("r1-") && pending[1].starts_with("r1-"), pending[0].c_str());
        for (const std::string& name : namesIn(dir / "state/tiny/state"))
            QVERIFY2(!name.ends_with("-1.bin") && name != "state-v1" && name.find(".tmp-") == std::string::npos,
                name.c_str()); // nothing of version 1 left behind

        // A restart on the full disk starts from the last committed version
        // and replays the accepted submission.
        server.kill();
        ServerProcess restarted;
        QVERIFY(restarted.start(spec, dir / "state", 1000));
        auto back = join(restarted, "v", identity);
        QCOMPARE(projectVersion(back), uint64_t(0));
        QVERIFY(QTest::qWaitFor(
            [&] {
                log += restarted.stderrText();
                return count(log, "not closed") >= 2;
            },
            20000));

        disk.release();
        QVERIFY2(QTest::qWaitFor([&] { return projectVersion(back) == 1; }, 40000), restarted.stderrText().constData());
        QVERIFY(QTest::qWaitFor([&] { return namesIn(dir / "state/tiny/pending").empty(); }, 10000));
        auto stats = back.client->request<net::MyStatsReply>(net::MyStatsRequest{"tiny"});
        QVERIFY(stats);
        QCOMPARE(stats->stats.tokens, kTaskTokens);
        const auto files = namesIn(dir / "state/tiny/state");
        QVERIFY2(std::count(files.begin(), files.end(), "state-v1") == 1
                && std::count(files.begin(), files.end(), "global-1.bin") == 1,
            files.empty() ? "" : files.front().c_str());
    }

    // A checkpoint that cannot be written: the round's version is published
    // all the same, the failure is logged naming the file, no partial folder
    // stays, and the next due checkpoint is written once space returns.
    void fullDiskAtACheckpointKeepsTheVersion()
    {
        const auto dir = root() / "checkpoint";
        SmallDisk disk;
        REQUIRE_SMALL_DISK(disk, dir / "state/tiny/checkpoints", 1u << 20);
        const auto spec = writeSpec(dir, m_data, SpecOptions{.tasksPerRound = 1, .checkpointEvery = 1});
        ServerProcess server;
        QVERIFY(server.start(spec, dir / "state", 1000));
        auto v = join(server, "v");
        disk.fill(16u << 10); // the model's weights (4 P bytes) do not fit
        auto t = askForTask(v, 0);
        QVERIFY(t);
        auto r = uploadAndSubmit(v, *t, int8Payload(elements(v), 1), kTaskTokens);
        QVERIFY2(r, r ? "" : r.error().message.c_str());
        QByteArray log;
        QVERIFY2(QTest::qWaitFor(
                     [&] {
                         log += server.stderrText();
                         return log.contains("checkpoint of round 1 failed");
                     },
                     30000),
            log.constData());
        QVERIFY2(log.contains("No space left on device") && log.contains("checkpoints/"), log.constData());
        QCOMPARE(projectVersion(v), uint64_t(1));
        for (const std::string& name : namesIn(dir / "state/tiny/checkpoints"))
            QVERIFY2(name.starts_with(".filler"), name.c_str()); // no partial checkpoint
        auto none = v.client->request<net::ListCheckpointsReply>(net::ListCheckpointsRequest{"tiny"});
        QVERIFY(none);
        QVERIFY(none->checkpoints.empty());

        disk.release();
        t = askForTask(v, 1);
        QVERIFY(t);
        r = uploadAndSubmit(v, *t, int8Payload(elements(v), 2), kTaskTokens);
        QVERIFY2(r, r ? "" : r.error().message.c_str());
        QVERIFY(QTest::qWaitFor(
            [&] {
                auto list = v.client->request<net::ListCheckpointsReply>(net::ListCheckpointsRequest{"tiny"});
                return list && list->checkpoints.size() == 1 && list->checkpoints[0].round == 2;
            },
            30000));
        QVERIFY(std::filesystem::exists(dir / "state/tiny/checkpoints/round-2/model.safetensors"));
    }

    // An upload chunk or a submit that cannot be stored is refused with a
    // clear error, nothing counted; sent again after space returns, it is
    // taken, and the round closes.
    void fullDiskRefusesAnUploadOrSubmitClearly()
    {
        const auto dir = root() / "submit";
        SmallDisk disk;
        REQUIRE_SMALL_DISK(disk, dir / "state", 4u << 20);
        const auto spec = writeSpec(dir, m_data, SpecOptions{.tasksPerRound = 1, .checkpointEvery = 100});
        ServerProcess server;
        QVERIFY(server.start(spec, dir / "state", 1000));
        auto v = join(server, "v");
        auto t = askForTask(v, 0);
        QVERIFY(t);
        const std::string payload = int8Payload(elements(v), 1);
        QVERIFY(payload.size() <= v.joined.chunkBytes); // one chunk

        disk.fill(0);
        const net::UploadChunkRequest chunk{v.project, v.joined.session, t->taskId, 0, payload};
        auto refused = v.client->request<net::UploadChunkReply>(chunk, 10000);
        QVERIFY(!refused);
        // A fault on the server's side: "internal", its own code first (docs/protocol.md §2).
        QCOMPARE(refused.error().code, std::string("internal"));
        QVERIFY2(refused.error().message.starts_with("io_error: ")
                && refused.error().message.find("uploads/task-1.part: No space left on device") != std::string::npos,
            refused.error().message.c_str());
        disk.release();
        auto uploaded = v.client->request<net::UploadChunkReply>(chunk, 10000);
        QVERIFY2(uploaded, uploaded ? "" : uploaded.error().message.c_str());

        disk.fill(0);
        const net::SubmitRequest submit = submitRequestFor(v, *t, payload, kTaskTokens);
        auto notStored = v.client->request<net::SubmitReply>(submit, 20000);
        QVERIFY(!notStored);
        QCOMPARE(notStored.error().code, std::string("internal"));
        QVERIFY2(notStored.error().message.starts_with("io_error: ")
                && notStored.error().message.find("No space left on device") != std::string::npos,
            notStored.error().message.c_str());
        QVERIFY(namesIn(dir / "state/tiny/pending").empty());
        disk.release();
        auto stored = v.client->request<net::SubmitReply>(submit, 20000);
        QVERIFY2(stored, stored ? "" : stored.error().message.c_str());
        QVERIFY(QTest::qWaitFor([&] { return projectVersion(v) == 1; }, 30000));
        auto stats = v.client->request<net::MyStatsReply>(net::MyStatsRequest{"tiny"});
        QVERIFY(stats);
        QCOMPARE(stats->stats.tokens, kTaskTokens);
        QCOMPARE(stats->stats.roundsRejected, uint64_t(0));
    }

    // A task whose record cannot be written (the state folder's disk is
    // full): get_task is answered internal/io_error naming the disk, no task
    // is handed out and no record is left; once space returns the next
    // get_task hands out a task whose record is on disk, and it trains.
    // (v's task first reserves the block of task ids in the ledger, so that
    // w's get_task meets the full disk at its record.)
    void fullDiskRefusesATaskClearly()
    {
        const auto dir = root() / "task";
        SmallDisk disk;
        REQUIRE_SMALL_DISK(disk, dir / "state", 4u << 20);
        const auto spec = writeSpec(dir, m_data, SpecOptions{.tasksPerRound = 2, .checkpointEvery = 100});
        ServerProcess server;
        QVERIFY(server.start(spec, dir / "state", 1000));
        auto v = join(server, "v");
        auto w = join(server, "w");
        const auto records = [&] {
            std::vector<std::string> names;
            for (const std::string& name : namesIn(dir / "state/tiny/tasks"))
                if (name.starts_with("t") && name.ends_with(".json"))
                    names.push_back(name);
            return names;
        };
        const std::optional<net::Task> first = askForTask(v, 0);
        QVERIFY(first);
        QCOMPARE(records().size(), std::size_t(1));

        disk.fill(0);
        const net::GetTaskRequest ask{w.project, w.joined.session, 0};
        auto refused = w.client->request<net::GetTaskReply>(ask, 20000);
        QVERIFY(!refused);
        QCOMPARE(refused.error().code, std::string("internal"));
        QVERIFY2(refused.error().message.starts_with("io_error: ")
                && refused.error().message.find("No space left on device") != std::string::npos,
            refused.error().message.c_str());
        QCOMPARE(records().size(), std::size_t(1)); // v's only
        disk.release();
        auto given = w.client->request<net::GetTaskReply>(ask, 20000);
        QVERIFY2(given, given ? "" : given.error().message.c_str());
        QVERIFY(given->task);
        QVERIFY(given->task->taskId != first->taskId);
        QCOMPARE(records().size(), std::size_t(2));
        for (auto [volunteer, t] : {std::pair{&v, *first}, std::pair{&w, *given->task}}) {
            auto r = uploadAndSubmit(*volunteer, t, int8Payload(elements(*volunteer), t.taskId + 10), kTaskTokens);
            QVERIFY2(r, r ? "" : r.error().message.c_str());
        }
        QVERIFY(QTest::qWaitFor([&] { return projectVersion(v) == 1; }, 30000));
    }

    // A checkpoint download into a data folder whose disk is full: the job
    // waits with a clear error (logged once), the checkpoint downloaded
    // before stays as it was, nothing of the new one is listed, and the
    // download completes by itself once space returns.
    void fullDataFolderHoldsACheckpointDownload()
    {
        const auto dir = root() / "download";
        SmallDisk disk;
        REQUIRE_SMALL_DISK(disk, dir / "checkpoints", 80u << 20); // the download keeps 64 MiB spare
        const auto spec = writeSpec(dir, m_data, SpecOptions{.tasksPerRound = 1, .checkpointEvery = 1});
        ServerProcess server;
        QVERIFY(server.start(spec, dir / "state", 1000));
        auto v = join(server, "v");
        QVERIFY(closeRoundsAlone(v, 2));
        QVERIFY(QTest::qWaitFor(
            [&] {
                auto list = v.client->request<net::ListCheckpointsReply>(net::ListCheckpointsRequest{"tiny"});
                return list && list->checkpoints.size() == 2;
            },
            30000));

        daemon::HubLink hub;
        hub.host = "127.0.0.1";
        hub.port = uint16_t(std::stoi(server.endpoint.substr(server.endpoint.rfind(':') + 1)));
        hub.publicKey = server.publicKey;
        const std::string link = daemon::formatHubLink(hub);
        daemon::HubDirectory hubs(m_context, *net::generateKeyPair());
        std::mutex mutex;
        std::map<uint64_t, control::Value> lastEvent; // by round
        std::vector<std::string> log;
        daemon::CheckpointsOptions options;
        options.root = dir / "checkpoints";
        options.publish = [&](std::string_view, const control::Value& body) {
            std::lock_guard lock(mutex);
            lastEvent[body["round"].toUInt()] = body;
        };
        options.log = [&](const std::string& line) {
            std::lock_guard lock(mutex);
            log.push_back(line);
        };
        options.retryMinMs = 300;
        daemon::Checkpoints checkpoints(hubs, options);
        auto stateOf = [&](uint64_t round) {
            std::lock_guard lock(mutex);
            return lastEvent.contains(round) ? lastEvent[round]["state"].toString() : std::string();
        };
        const auto first = dir / "checkpoints/tiny/round-1";
        QVERIFY(checkpoints.download(link, "tiny", 1));
        QVERIFY(QTest::qWaitFor([&] { return stateOf(1) == "ready"; }, 30000));
        const std::string weights = fileText(first / "model.safetensors");
        QVERIFY(!weights.empty());

        disk.fill(8u << 20);
        QVERIFY(checkpoints.download(link, "tiny", 2));
        QVERIFY(QTest::qWaitFor([&] { return stateOf(2) == "waiting"; }, 30000));
        std::string error;
        {
            std::lock_guard lock(mutex);
            error = lastEvent[2]["error"].toString();
        }
        QVERIFY2(error.find("not enough free disk in " + (dir / "checkpoints/tiny").string()) != std::string::npos,
            error.c_str());
        // Tried again (every 300 ms here), said once.
        QVERIFY(!QTest::qWaitFor(
            [&] {
                std::lock_guard lock(mutex);
                return std::count_if(log.begin(), log.end(), [](const std::string& line) {
                    return line.find("download waits") != std::string::npos;
                }) > 1;
            },
            2000));
        QCOMPARE(fileText(first / "model.safetensors"), weights);
        QVERIFY(!std::filesystem::exists(dir / "checkpoints/tiny/round-2"));
        auto listed = checkpoints.list(hub, "tiny");
        QVERIFY2(listed, listed ? "" : listed.error().message.c_str());
        QCOMPARE(listed->at(1)["state"].toString(), std::string("waiting"));

        disk.release();
        QVERIFY(QTest::qWaitFor([&] { return stateOf(2) == "ready"; }, 30000));
        QVERIFY(std::filesystem::exists(dir / "checkpoints/tiny/round-2/model.safetensors"));
        QCOMPARE(fileText(first / "model.safetensors"), weights);
    }

    // A volunteer joining at version 2 downloads the full state (the update
    // from version 0 is no longer kept) into a data folder whose disk is
    // full: it says so and tries again, instead of stopping, and trains
    // once space returns.
    void fullDataFolderHoldsAStateDownload()
    {
        const auto dir = root() / "state-download";
        SmallDisk disk;
        REQUIRE_SMALL_DISK(disk, dir / "home", 4u << 20);
        const auto spec = writeSpec(dir, m_data, SpecOptions{.tasksPerRound = 1, .checkpointEvery = 100});
        ServerProcess server;
        QVERIFY(server.start(spec, dir / "state", 1000));
        auto v = join(server, "v");
        QVERIFY(closeRoundsAlone(v, 2));
        disk.fill(32u << 10); // the key fits, the state (4 P bytes) does not
        QVERIFY(uint64_t(4 * elements(v)) > disk.freeBytes() + (32u << 10));
        WorkerProcess worker;
        worker.start(server, m_data, dir / "home", "w", 1);
        QVERIFY2(
            QTest::qWaitFor([&] { return worker.log().contains("retrying in"); }, 60000), worker.log().constData());
        QVERIFY2(worker.log().contains("No space left on device"), worker.log().constData());
        QVERIFY2(worker.running(), worker.log().constData());

        disk.release();
        const nlohmann::json summary = worker.finish(120000);
        // Trained from the downloaded state (whether the gate takes it, next
        // to the test's random updates, is not the point here).
        QVERIFY2(summary.value("tasks", 0) == 1, (summary.dump() + "\n" + worker.log().toStdString()).c_str());
        QVERIFY(worker.log().contains("version 2: full state downloaded and verified"));
    }
};

QTEST_GUILESS_MAIN(TestDiskFull)
#include "tst_disk_full.moc"
