// The training core as its own process (docs/protocol.md §13): the frames
// and what a malformed one does, the windows file, the torch-free manifest,
// and a real crowdtrain-core trained through CoreTrainer against the
// in-process InnerTrainer; a core killed, hung or sending garbage mid-task
// fails the task and never the caller, and the next task gets a new core.
#include "core/result.h"
#include "engine/cpu_runtime.h"
#include "engine/diloco/flat_params.h"
#include "engine/token_shard.h"
#include "net/core_link/core_messages.h"
#include "net/core_link/core_process.h"
#include "net/core_link/windows_file.h"
#include "net/core_service/cuda_driver.h"
#include "net/core_service/inner_trainer.h"
#include "net/volunteer/agent.h"
#include "net/volunteer/core_trainer.h"
#include "net/volunteer/range_source.h"
#include "net/wire/error_codes.h"

#include "coordinator_process.h"

#include <QTemporaryDir>
#include <QTest>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <sstream>
#include <string>
#include <sys/resource.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace crowdtrain;

namespace {

std::filesystem::path dirOf(const QTemporaryDir& dir)
{
    return dir.path().toStdString();
}

std::pair<corelink::CoreChannel, corelink::CoreChannel> channelPair()
{
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
        qFatal("socketpair failed");
    return {corelink::CoreChannel(fds[0]), corelink::CoreChannel(fds[1])};
}

void writeRaw(int fd, std::string_view bytes)
{
    QCOMPARE(::write(fd, bytes.data(), bytes.size()), ssize_t(bytes.size()));
}

std::string lengthPrefix(uint32_t n)
{
    const char b[4] = {char(n >> 24), char(n >> 16), char(n >> 8), char(n)};
    return std::string(b, 4);
}

// The model and settings every training test here uses: small, but a real GPT.
const engine::GptConfig kModel{2, 2, 16, 8, 32, 0.0};
const net::InnerSettings kInner{4, 4, 8, 1e-2, 1e-3, 2, 0, 0.9, 0.95, 0.1, 1.0};

// This build's CPU core, or the core CROWDTRAIN_TEST_CORE names (CTest's
// tst_core_on_cuda_core runs every case against the CUDA core, which trains
// on the CPU too).
std::filesystem::path coreBinary()
{
    if (const char* other = std::getenv("CROWDTRAIN_TEST_CORE"); other && *other)
        return other;
    return std::filesystem::path(CROWDTRAIN_BIN_DIR) / "crowdtrain-core";
}

// The family the core under test says it is.
std::string coreFamily()
{
    return coreBinary().filename() == "crowdtrain-core-cuda" ? "cuda" : "cpu";
}

// A task's data: a shard of counting tokens and the source over its range.
struct TaskData {
    QTemporaryDir dir;
    std::unique_ptr<volunteer::ShardLibrary> library;
    TaskData()
    {
        std::vector<uint16_t> tokens(4000);
        for (std::size_t k = 0; k < tokens.size(); ++k)
            tokens[k] = uint16_t((k * 7 + k / 13) % 32);
        if (Status written = engine::writeTokenShard(dirOf(dir) / "t_train.bin", tokens); !written)
            qFatal("%s", written.error().message.c_str());
        library = std::make_unique<volunteer::ShardLibrary>(dirOf(dir));
    }
    std::unique_ptr<engine::BatchSource> source()
    {
        auto made = volunteer::RangeBatchSource::create(*library, {{"t_train.bin", 0, 4000}}, kModel.blockSize,
            kModel.vocabSize, int64_t(kInner.batchSize), kInner.steps * kInner.batchSize);
        if (!made)
            qFatal("%s", made.error().message.c_str());
        return std::move(*made);
    }
};

std::vector<float> seededTheta()
{
    engine::Gpt model = diloco::seededModel(kModel, 7);
    return diloco::flatten(model);
}

volunteer::CoreTaskRequest taskRequest()
{
    volunteer::CoreTaskRequest r;
    r.taskId = 1;
    r.model = corelink::modelConfigOf(kModel);
    r.inner = kInner;
    r.threads = 1;
    r.steps = kInner.steps;
    return r;
}

// The fields of /proc/PID/stat after the command's name: [0] is the
// state (field 3), [1] the parent (4), [16] the nice value (19).
std::vector<std::string> statFields(const std::filesystem::path& process)
{
    std::ifstream stat(process / "stat");
    std::string line;
    std::getline(stat, line);
    const auto close = line.rfind(')');
    std::vector<std::string> fields;
    if (close == std::string::npos)
        return fields;
    std::istringstream rest(line.substr(close + 1));
    for (std::string field; rest >> field;)
        fields.push_back(field);
    return fields;
}

// SIGKILL to this test's training cores (as the kernel's OOM killer would):
// the children of this process whose command line is crowdtrain-core's (its
// name may read "exe": the core re-executes itself to tune OpenBLAS).
// Returns how many were killed.
int killCores()
{
    int killed = 0;
    for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
        const std::string name = entry.path().filename().string();
        if (name.find_first_not_of("0123456789") != std::string::npos)
            continue;
        const std::vector<std::string> fields = statFields(entry.path());
        if (fields.size() < 2)
            continue;
        std::ifstream cmdline(entry.path() / "cmdline");
        std::string command((std::istreambuf_iterator<char>(cmdline)), std::istreambuf_iterator<char>());
        if (std::stol(fields[1]) == ::getpid() && command.find("crowdtrain-core") != std::string::npos) {
            ::kill(pid_t(std::stol(name)), SIGKILL);
            ++killed;
        }
    }
    return killed;
}

// A process's nice value (/proc/PID/stat, field 19).
int niceOf(pid_t pid)
{
    const std::vector<std::string> fields = statFields("/proc/" + std::to_string(pid));
    return fields.size() > 16 ? std::stoi(fields[16]) : -100;
}

// The process environment for one test's cores, restored after.
class ScopedEnv {
public:
    ScopedEnv(const char* name, const QByteArray& value)
        : m_name(name)
    {
        qputenv(name, value);
    }
    ~ScopedEnv() { qunsetenv(m_name); }

private:
    const char* m_name;
};

} // namespace

class TestCore : public QObject {
    Q_OBJECT

private slots:
    void initTestCase()
    {
        // As crowdtrain-core does, so that both sides' numerics match.
        engine::configureCpuThreads(0);
    }

    // The manifest the daemon computes from the config equals the built model's.
    void manifestFromTheConfigIsTheModels_data()
    {
        QTest::addColumn<int>("layers");
        QTest::addColumn<int>("heads");
        QTest::addColumn<int>("embd");
        QTest::newRow("tiny") << 1 << 1 << 8;
        QTest::newRow("two blocks") << 2 << 2 << 16;
        QTest::newRow("three blocks, 4 heads") << 3 << 4 << 32;
    }
    void manifestFromTheConfigIsTheModels()
    {
        QFETCH(int, layers);
        QFETCH(int, heads);
        QFETCH(int, embd);
        const engine::GptConfig config{layers, heads, embd, 12, 50, 0.0};
        engine::Gpt model(config);
        const diloco::Manifest built = diloco::manifestOf(model);
        const diloco::Manifest computed = diloco::manifestOf(config);
        QVERIFY(diloco::sameLayout(built, computed));
        QCOMPARE(computed.totalElements, engine::parameterCount(config));
    }

    void framesRoundTripWhateverTheReadsSize()
    {
        auto [a, b] = channelPair();
        corelink::StepDone step;
        step.step = 3;
        step.loss = 2.5;
        step.stepMs = 12.25;
        step.tokensPerSecond = 1000;
        QVERIFY(a.send(step.encode()));
        QVERIFY(a.send(corelink::message(corelink::type::kGo)));
        auto first = b.receive(1000);
        QVERIFY2(first, first ? "" : first.error().message.c_str());
        auto decoded = corelink::StepDone::decode(*first);
        QVERIFY(decoded);
        QCOMPARE(decoded->step, uint64_t(3));
        QCOMPARE(decoded->loss, 2.5);
        QCOMPARE(decoded->stepMs, 12.25);
        QCOMPARE(decoded->deviceMs, 0.0); // a CPU core sends none
        QCOMPARE(decoded->busyMs(), 12.25);
        auto second = b.receive(1000);
        QVERIFY(second);
        QCOMPARE(second->type, std::string("go"));

        // A GPU core's step carries the device's own time, which the
        // busy share then counts; a negative one is refused.
        step.deviceMs = 9.5;
        QVERIFY(a.send(step.encode()));
        auto timed = b.receive(1000);
        QVERIFY(timed);
        auto decodedTimed = corelink::StepDone::decode(*timed);
        QVERIFY(decodedTimed);
        QCOMPARE(decodedTimed->deviceMs, 9.5);
        QCOMPARE(decodedTimed->busyMs(), 9.5);
        corelink::StepDone untimed = step;
        untimed.deviceMs = 0;
        net::MapWriter bad = untimed.encode();
        bad.f64("device_ms", -1.0);
        QVERIFY(a.send(bad));
        auto badFrame = b.receive(1000);
        QVERIFY(badFrame);
        QVERIFY(!corelink::StepDone::decode(*badFrame));

        // A frame that arrives a byte at a time is one frame.
        net::MapWriter w = corelink::message(corelink::type::kText);
        w.str("text", "hello");
        const std::string body = w.bytes();
        const std::string frame = lengthPrefix(uint32_t(body.size())) + body;
        for (char c : frame)
            writeRaw(a.fd(), std::string_view(&c, 1));
        auto text = b.receive(1000);
        QVERIFY(text);
        QCOMPARE(*corelink::decodeText(*text), std::string("hello"));

        // Nothing sent: a timeout, and the channel stays usable.
        auto none = b.receive(20);
        QVERIFY(!none);
        QCOMPARE(none.error().code, std::string(net::errc::kTimeout));
        QVERIFY(b.open());
    }

    void malformedFramesAreRefusedAndCloseTheChannel_data()
    {
        QTest::addColumn<QByteArray>("bytes");
        QTest::addColumn<QString>("code");
        QTest::newRow("length 0") << QByteArray::fromStdString(lengthPrefix(0)) << QStringLiteral("malformed");
        QTest::newRow("length over 1 MiB")
            << QByteArray::fromStdString(lengthPrefix((1u << 20) + 1) + "x") << QStringLiteral("malformed");
        QTest::newRow("not msgpack") << QByteArray::fromStdString(lengthPrefix(3) + "\xc1\xc1\xc1")
                                     << QStringLiteral("malformed");
        net::MapWriter noType;
        noType.u64("step", 1);
        QTest::newRow("a map without type")
            << QByteArray::fromStdString(lengthPrefix(uint32_t(noType.bytes().size())) + noType.bytes())
            << QStringLiteral("malformed");
        QTest::newRow("cut off, then closed")
            << QByteArray::fromStdString(lengthPrefix(100) + "abc") << QStringLiteral("closed");
    }
    void malformedFramesAreRefusedAndCloseTheChannel()
    {
        QFETCH(QByteArray, bytes);
        QFETCH(QString, code);
        auto [a, b] = channelPair();
        writeRaw(a.fd(), std::string_view(bytes.constData(), std::size_t(bytes.size())));
        a.close();
        auto frame = b.receive(2000);
        QVERIFY(!frame);
        QCOMPARE(QString::fromStdString(frame.error().code), code);
        QVERIFY(!b.open());
    }

    // A frame of the right type with a bad field is an error naming the field.
    void badFieldsAreNamed()
    {
        auto [a, b] = channelPair();
        net::MapWriter w = corelink::message(corelink::type::kStep);
        w.u64("step", 0).f64("loss", 1).f64("step_ms", -5).f64("tokens_per_second", 1);
        QVERIFY(a.send(w));
        auto frame = b.receive(1000);
        QVERIFY(frame);
        auto step = corelink::StepDone::decode(*frame);
        QVERIFY(!step);
        QCOMPARE(step.error().code, std::string(net::errc::kMalformed));
        QVERIFY(step.error().message.find("step") != std::string::npos);
        QVERIFY(!corelink::TrainDone::decode(*frame)); // wrong type
    }

    // The windows file holds exactly what the source drew, in order.
    void aMissingOrOldDriverIsNamed()
    {
        using coreservice::CudaDriver;
        QCOMPARE(coreservice::driverBranchFor(13), 580);
        QCOMPARE(coreservice::driverBranchFor(12), 525);
        const std::string none = coreservice::noCudaDeviceNote(CudaDriver{}, 13000);
        QVERIFY2(none.find("no NVIDIA driver") != std::string::npos && none.find("580 or newer") != std::string::npos,
            none.c_str());
        const std::string old = coreservice::noCudaDeviceNote(CudaDriver{true, 12040}, 13000);
        QVERIFY2(old.find("up to 12.4") != std::string::npos && old.find("CUDA 13.0") != std::string::npos
                && old.find("update to NVIDIA driver 580 or newer") != std::string::npos,
            old.c_str());
        const std::string noGpu = coreservice::noCudaDeviceNote(CudaDriver{true, 13010}, 13000);
        QVERIFY2(
            noGpu.find("sees no GPU") != std::string::npos && noGpu.find("update") == std::string::npos, noGpu.c_str());
        // This machine: a probe that never crashes, whatever it finds.
        const CudaDriver here = coreservice::probeCudaDriver();
        QVERIFY(here.found || here.cudaVersion == 0);
    }

    void windowsFileReplaysTheSource()
    {
        TaskData data;
        QTemporaryDir out;
        const auto file = dirOf(out) / "windows.bin";
        auto source = data.source();
        QVERIFY(corelink::writeWindowsFile(file, *source, 4, 16));
        auto replay = corelink::WindowsFileSource::open(file, kModel.blockSize, kModel.vocabSize);
        QVERIFY2(replay, replay ? "" : replay.error().message.c_str());
        QCOMPARE((*replay)->windowCount(), uint64_t(16));
        auto again = data.source();
        std::vector<int64_t> x1(16 * 8), y1(16 * 8), x2(16 * 8), y2(16 * 8);
        again->next(16, x1.data(), y1.data());
        (*replay)->next(16, x2.data(), y2.data());
        QCOMPARE(x1, x2);
        QCOMPARE(y1, y2);

        // A vocabulary smaller than its tokens, another block size, a torn file.
        QCOMPARE(corelink::WindowsFileSource::open(file, kModel.blockSize, 8).error().code,
            std::string(net::errc::kBadSize));
        QCOMPARE(corelink::WindowsFileSource::open(file, 16, kModel.vocabSize).error().code,
            std::string(net::errc::kBadSize));
        std::filesystem::resize_file(file, std::filesystem::file_size(file) - 3);
        QCOMPARE(corelink::WindowsFileSource::open(file, kModel.blockSize, kModel.vocabSize).error().code,
            std::string(net::errc::kMalformed));
    }

    // A task trained by crowdtrain-core ends where the in-process trainer ends.
    void theCoreTrainsAsTheInnerTrainerDoes()
    {
        TaskData data;
        const std::vector<float> theta = seededTheta();
        coreservice::InnerTrainer local(kModel, kInner, "cpu", 1);
        std::atomic<bool> no{false};
        auto expected = local.run(theta, data.source(), kInner.steps, 0, no, no, {});
        QVERIFY2(expected, expected ? "" : expected.error().message.c_str());

        QTemporaryDir scratch;
        volunteer::CoreHost host({.cpuCore = coreBinary()}, {});
        volunteer::CoreTrainer trainer(host, {.scratchDir = dirOf(scratch) / "core"});
        std::vector<uint64_t> steps;
        auto source = data.source();
        auto outcome = trainer.run(taskRequest(), theta, "sha-of-theta", *source, no, no, {},
            [&](const corelink::StepDone& step) { steps.push_back(step.step); });
        QVERIFY2(outcome, outcome ? "" : outcome.error().message.c_str());
        QCOMPARE(steps, (std::vector<uint64_t>{1, 2, 3, 4}));
        QCOMPARE(outcome->steps, expected->steps);
        QCOMPARE(outcome->tokens, expected->tokens);
        // The daemon does not read the local weights whole: they stay in the
        // core's file, for the uploader to read a chunk at a time.
        QVERIFY(outcome->local.empty());
        QCOMPARE(std::filesystem::file_size(outcome->localFile), theta.size() * sizeof(float));
        QVERIFY(volunteer::loadLocalWeights(*outcome, theta.size()));
        QVERIFY(outcome->localFile.empty());
        QCOMPARE(outcome->local.size(), expected->local.size());
        float worst = 0;
        for (std::size_t i = 0; i < theta.size(); ++i)
            worst = std::max(worst, std::abs(outcome->local[i] - expected->local[i]));
        // Bit-exact is not promised: the two processes may run OpenBLAS's
        // kernels with other blockings. 1e-5 is far below one step's change.
        QVERIFY2(worst <= 1e-5f, qPrintable(QString::number(worst)));
        QCOMPARE(trainer.started().deviceName, std::string("cpu"));
        QVERIFY(host.running());
        QCOMPARE(host.hello().family, coreFamily());

        // The core is kept: a second task goes to the same process, its AdamW older.
        auto second = data.source();
        auto again = trainer.run(taskRequest(), theta, "sha-of-theta", *second, no, no, {}, {});
        QVERIFY(again);
        QCOMPARE(host.starts(), uint64_t(1));
        QCOMPARE(trainer.started().innerStepsTaken, uint64_t(kInner.steps));
    }

    // SIGKILL mid-task (as the OOM killer would): the task fails with a clear
    // error, the caller goes on, and the next task starts a new core.
    void aKilledCoreFailsItsTaskAndANewOneTakesTheNext()
    {
        TaskData data;
        QTemporaryDir scratch;
        volunteer::CoreHost host({.cpuCore = coreBinary()}, {});
        volunteer::CoreTrainer trainer(host, {.scratchDir = dirOf(scratch) / "core"});
        const std::vector<float> theta = seededTheta();
        std::atomic<bool> no{false};
        auto source = data.source();
        auto outcome = trainer.run(taskRequest(), theta, "", *source, no, no, {}, [&](const corelink::StepDone& step) {
            if (step.step == 2)
                QCOMPARE(killCores(), 1);
        });
        QVERIFY(!outcome);
        QCOMPARE(outcome.error().code, std::string(net::errc::kCoreFailed));
        QVERIFY2(outcome.error().message.find("signal 9") != std::string::npos, outcome.error().message.c_str());
        QVERIFY(!host.running());

        auto next = data.source();
        auto retried = trainer.run(taskRequest(), theta, "", *next, no, no, {}, {});
        QVERIFY2(retried, retried ? "" : retried.error().message.c_str());
        QCOMPARE(retried->steps, uint64_t(kInner.steps));
        QCOMPARE(host.starts(), uint64_t(2));
    }

    // A core of the protocol before this daemon's (version 1: no
    // int8_moments or bf16_host_master, which it would ignore and so train
    // in more memory than planned) is refused at hello, by name, and ended.
    void aCoreOfAnotherProtocolIsRefused()
    {
        ScopedEnv faultEnv("CROWDTRAIN_CORE_FAULT", "old_protocol");
        auto core = corelink::CoreProcess::start({.binary = coreBinary()});
        QVERIFY(!core);
        QCOMPARE(core.error().code, std::string(net::errc::kCoreFailed));
        const std::string expected = "speaks protocol " + std::to_string(corelink::kCoreProtocol - 1) + ", this daemon "
            + std::to_string(corelink::kCoreProtocol) + ": install matching crowdtrain packages";
        QVERIFY2(core.error().message.find(expected) != std::string::npos, core.error().message.c_str());
    }

    // A core that hangs inside a step is stopped after the step deadline; one
    // that writes garbage is stopped at once. Neither takes the caller down.
    void aHungOrGarbledCoreIsStopped_data()
    {
        QTest::addColumn<QByteArray>("fault");
        QTest::addColumn<QString>("code");
        QTest::newRow("hangs in step 2") << QByteArray("hang_at_step:2") << QStringLiteral("core_hung");
        QTest::newRow("garbage for step 1") << QByteArray("garbage_at_step:1") << QStringLiteral("core_failed");
        QTest::newRow("aborts in step 3") << QByteArray("crash_at_step:3") << QStringLiteral("core_failed");
    }
    void aHungOrGarbledCoreIsStopped()
    {
        QFETCH(QByteArray, fault);
        QFETCH(QString, code);
        TaskData data;
        QTemporaryDir scratch;
        ScopedEnv faultEnv("CROWDTRAIN_CORE_FAULT", fault);
        ScopedEnv onceEnv("CROWDTRAIN_CORE_FAULT_ONCE", QByteArray::fromStdString((dirOf(scratch) / "once").string()));
        volunteer::CoreHost host({.cpuCore = coreBinary()}, {});
        volunteer::CoreTrainer trainer(
            host, {.scratchDir = dirOf(scratch) / "core", .stepTimeoutMs = 1500, .loadTimeoutMs = 60000});
        const std::vector<float> theta = seededTheta();
        std::atomic<bool> no{false};
        auto source = data.source();
        auto outcome = trainer.run(taskRequest(), theta, "", *source, no, no, {}, {});
        QVERIFY(!outcome);
        QCOMPARE(QString::fromStdString(outcome.error().code), code);
        QVERIFY(!host.running());

        auto next = data.source();
        auto retried = trainer.run(taskRequest(), theta, "", *next, no, no, {}, {});
        QVERIFY2(retried, retried ? "" : retried.error().message.c_str());
        QCOMPARE(host.starts(), uint64_t(2));
    }

    // A volunteer whose core is killed mid-task (SIGKILL, as the OOM killer
    // sends) drops that task, starts a new core after its backoff and goes
    // on training a real coordinator's tasks, which are accepted.
    void anAgentWhoseCoreIsKilledGoesOn()
    {
        QTemporaryDir tmp;
        const std::filesystem::path root = dirOf(tmp);
        const auto data = testing::preparedText(root / "prepared");
        testing::SpecOptions spec;
        spec.innerSteps = 6;
        spec.batchSize = 4;
        spec.tasksPerRound = 1;
        testing::ServerProcess server;
        QVERIFY(server.start(testing::writeSpec(root / "spec", data, spec), root / "state", 300));

        volunteer::AgentOptions options;
        options.endpoint = server.endpoint;
        options.serverKey = server.publicKey;
        options.project = "tiny";
        options.dataDir = root / "volunteer";
        options.threads = 1;
        options.maxTasks = 3;
        options.coreBinary = coreBinary();
        options.log = [](const std::string& line) { qDebug("agent: %s", line.c_str()); };
        std::atomic<int> steps{0};
        options.betweenSteps = [&](double, const std::atomic<bool>&) {
            if (++steps == 3) // the first task's third step
                QCOMPARE(killCores(), 1);
        };
        volunteer::VolunteerAgent agent(options);
        Status ran = Status::success();
        std::thread runner([&] { ran = agent.run(); });
        runner.join();
        QVERIFY2(ran, ran ? "" : ran.error().message.c_str());
        const volunteer::AgentSummary summary = agent.summary();
        QCOMPARE(summary.tasks, uint64_t(3));
        QCOMPARE(summary.accepted, uint64_t(3));
        QCOMPARE(summary.dropped, uint64_t(1)); // the killed core's task, and only it
        QCOMPARE(agent.coreStarts(), uint64_t(2));
        QCOMPARE(summary.coreFamily, coreFamily());
    }

    // Giving the device back mid-task: the task wraps up with the steps done
    // and, once its lease ends, the core exits.
    void releaseWrapsTheTaskUpAndEndsTheCore()
    {
        TaskData data;
        QTemporaryDir scratch;
        std::mutex logMutex;
        std::vector<std::string> log;
        volunteer::CoreHost host({.cpuCore = coreBinary()}, [&](const std::string& line) {
            std::lock_guard lock(logMutex);
            log.push_back(line);
        });
        volunteer::CoreTrainer trainer(host, {.scratchDir = dirOf(scratch) / "core"});
        const std::vector<float> theta = seededTheta();
        std::atomic<bool> no{false};
        std::atomic<bool> release{false};
        auto source = data.source();
        auto outcome = trainer.run(
            taskRequest(), theta, "", *source, no, no, [&] { return release.load(); },
            [&](const corelink::StepDone& step) {
                if (step.step == 2) {
                    release = true;
                    // From another thread, as the daemon's: busy, it ends with the lease.
                    std::thread([&] { host.release("a test gives the device back"); }).join();
                }
            });
        QVERIFY2(outcome, outcome ? "" : outcome.error().message.c_str());
        QCOMPARE(outcome->steps, uint64_t(2));
        QVERIFY(!host.running());
        {
            // It left when told, not killed after the grace.
            std::lock_guard lock(logMutex);
            QVERIFY(!log.empty());
            QVERIFY2(log.back().find("exited with status 0") != std::string::npos, log.back().c_str());
        }

        // Idle: released at once, and the next task starts a new one.
        auto next = data.source();
        QVERIFY(trainer.run(taskRequest(), theta, "", *next, no, no, {}, {}));
        QVERIFY(host.running());
        host.release("idle");
        QTRY_VERIFY(!host.running());
        QCOMPARE(host.starts(), uint64_t(2));
    }

    // Training takes what nobody else wants: a training core runs at nice
    // 19, below the volunteer's desktop and a coordinator on the same
    // machine; a core someone waits for ("Try it") at the caller's own.
    void aTrainingCoreRunsBelowEverythingElse()
    {
        const int own = ::getpriority(PRIO_PROCESS, 0);
        QVERIFY2(own < corelink::kTrainingCpuNice, "the test itself runs at nice 19");
        volunteer::CoreHost host({.cpuCore = coreBinary()}, {});
        {
            auto lease = host.lease();
            QVERIFY2(lease, lease ? "" : lease.error().message.c_str());
            QCOMPARE(niceOf(lease->core().pid()), corelink::kTrainingCpuNice);
        }
        auto core = corelink::CoreProcess::start({.binary = coreBinary()});
        QVERIFY2(core, core ? "" : core.error().message.c_str());
        QCOMPARE(niceOf((*core)->pid()), own);
    }
};

QTEST_GUILESS_MAIN(TestCore)
#include "tst_core.moc"
