// A volunteer's session against a real crowdtrain-server on loopback:
// - the coordinator comes back, mid-task, with another model and other
//   inner settings (issue 24): the session re-joins while the task trains,
//   the task is dropped, and the volunteer trains the new model;
// - work between training and the upload that takes many heartbeat
//   intervals (encoding at GPT-2 size takes seconds) keeps the session: the
//   task is accepted, never dropped for a session the coordinator ended.
#include "coordinator_process.h"
#include "core/thread_priority.h"
#include "free_port.h"
#include "net/volunteer/agent.h"

#include <QTemporaryDir>
#include <QTest>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <pthread.h>
#include <thread>

using namespace crowdtrain;

class TestRejoin : public QObject {
    Q_OBJECT

private slots:
    void changedModelWhileTrainingDropsTheTask();
    void aSlowEncodeKeepsTheSession();
};

void TestRejoin::changedModelWhileTrainingDropsTheTask()
{
    QTemporaryDir tmp;
    QVERIFY(tmp.isValid());
    const std::filesystem::path root = tmp.path().toStdString();
    const auto data = testing::preparedText(root / "prepared");
    const std::string bind = "tcp://127.0.0.1:" + std::to_string(testing::freePort());

    // Tasks long enough that the restart lands inside one.
    testing::SpecOptions first;
    first.innerSteps = 20000; // with batch 1 as much as the data allows for one task
    first.batchSize = 1;
    first.deadlineSeconds = 3600;
    testing::ServerProcess before;
    QVERIFY(before.start(testing::writeSpec(root / "a", data, first), root / "state-a", 300, bind));

    std::mutex linesMutex;
    std::vector<std::string> lines;
    const auto logged = [&](const std::string& text) {
        std::lock_guard lock(linesMutex);
        return std::any_of(lines.begin(), lines.end(), [&](const std::string& l) { return l.find(text) != l.npos; });
    };
    volunteer::AgentOptions options;
    options.endpoint = bind;
    options.serverKey = before.publicKey;
    options.project = "tiny";
    options.dataDir = root / "volunteer";
    options.threads = 1;
    options.log = [&](const std::string& line) {
        std::lock_guard lock(linesMutex);
        lines.push_back(line);
    };
    volunteer::VolunteerAgent agent(options);
    Status ran = Status::success();
    std::thread runner([&] { ran = agent.run(); });
    struct Joiner {
        volunteer::VolunteerAgent& agent;
        std::thread& thread;
        ~Joiner()
        {
            agent.stop();
            if (thread.joinable())
                thread.join();
        }
    } joiner{agent, runner};

    QTRY_VERIFY_WITH_TIMEOUT(
        agent.summary().phase == volunteer::AgentPhase::Training && agent.summary().step >= 3, 120000);
    const uint64_t tasksBefore = agent.summary().accepted;
    before.kill();

    // Same key and port, another model (wider) and other inner settings.
    std::filesystem::create_directories(root / "state-b");
    std::filesystem::copy_file(root / "state-a" / "server.key", root / "state-b" / "server.key");
    testing::SpecOptions second;
    second.innerSteps = 4;
    second.embd = 48;
    second.tasksPerRound = 1;
    testing::ServerProcess after;
    QVERIFY(after.start(testing::writeSpec(root / "b", data, second), root / "state-b", 300, bind));

    QTRY_VERIFY_WITH_TIMEOUT(logged("changed while training task"), 60000);
    QTRY_VERIFY_WITH_TIMEOUT(agent.summary().accepted > tasksBefore, 120000);
    QVERIFY(agent.summary().dropped >= 1);
    agent.stop();
    runner.join();
    QVERIFY2(ran, ran ? "" : ran.error().message.c_str());
}

void TestRejoin::aSlowEncodeKeepsTheSession()
{
    QTemporaryDir tmp;
    QVERIFY(tmp.isValid());
    const std::filesystem::path root = tmp.path().toStdString();
    const auto data = testing::preparedText(root / "prepared");
    testing::SpecOptions spec;
    spec.innerSteps = 2;
    spec.tasksPerRound = 1;
    testing::ServerProcess server;
    // A session ends after 3 silent intervals of 200 ms.
    QVERIFY(server.start(testing::writeSpec(root / "spec", data, spec), root / "state", 200));

    volunteer::AgentOptions options;
    options.endpoint = server.endpoint;
    options.serverKey = server.publicKey;
    options.project = "tiny";
    options.dataDir = root / "volunteer";
    options.threads = 1;
    // The encoding of each task's pseudo-gradient stands still for ten
    // intervals, as a 124M model's does on a slow machine. The pause is the
    // condition under test (the slow work), not a wait for something.
    // It runs on a thread of its own at the lowest priority (the desktop
    // comes first, as for the training core), whatever this test's own.
    std::atomic<int> encodeNice{-100};
    char encodeThread[16] = {}; // its name, as `top -H` shows it
    options.alterPseudoGradient = [&encodeNice, &encodeThread](std::vector<float>&) {
        encodeNice = ::getpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)));
        ::pthread_getname_np(::pthread_self(), encodeThread, sizeof encodeThread);
        std::this_thread::sleep_for(std::chrono::seconds(2));
    };
    // So does the thread that drives the core (it writes theta for the core
    // and reads its weights back), where the busy share's pauses run.
    std::atomic<int> trainingNice{-100};
    char trainingThread[16] = {};
    options.betweenSteps = [&trainingNice, &trainingThread](double, const std::atomic<bool>&) {
        trainingNice = ::getpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)));
        ::pthread_getname_np(::pthread_self(), trainingThread, sizeof trainingThread);
    };
    volunteer::VolunteerAgent agent(options);
    Status ran = Status::success();
    std::thread runner([&] { ran = agent.run(); });
    // The first task's fate: accepted, or dropped for a lost session.
    QTRY_VERIFY_WITH_TIMEOUT(agent.summary().accepted + agent.summary().dropped >= 1, 120000);
    agent.stop();
    runner.join();
    QVERIFY2(ran, ran ? "" : ran.error().message.c_str());
    const volunteer::AgentSummary summary = agent.summary();
    QCOMPARE(summary.dropped, uint64_t(0));
    QCOMPARE(summary.accepted, uint64_t(1));
    QCOMPARE(summary.reconnects, uint64_t(0));
    QCOMPARE(encodeNice.load(), core::kLowestNice);
    QCOMPARE(std::string(encodeThread), std::string("idle-work"));
    QCOMPARE(trainingNice.load(), core::kLowestNice);
    QCOMPARE(std::string(trainingThread), std::string("task-training"));
}

QTEST_GUILESS_MAIN(TestRejoin)
#include "tst_rejoin.moc"
