// A volunteer with several devices (issue 27, item 8): the memory plan that
// picks data parallel or ZeRO-3 and the micro-batch; a team of in-process
// ranks (two CPU "devices" on Gloo over loopback, as two GPUs would be on
// NCCL) against one device training the same batch; the inner trainer's
// tasks across the team; and a volunteer agent training a real
// coordinator's tasks across two devices.
#include "engine/diloco/flat_params.h"
#include "engine/parallel/device_team.h"
#include "net/core_link/core_channel.h"
#include "net/core_link/core_messages.h"
#include "net/core_service/inner_trainer.h"
#include "net/limits/memory.h"
#include "net/volunteer/agent.h"
#include "net/volunteer/task_runner.h"

#include "coordinator_process.h"
#include "free_port.h"
#include "parallel_fixtures.h"

#include <QTemporaryDir>
#include <QTest>

#include <fstream>
#include <thread>

using namespace crowdtrain;
using namespace crowdtrain::testing;

namespace {

constexpr uint64_t kGiB = uint64_t(1) << 30;

// GPT-2 XL: 1.56 B parameters, 25 GB of weights, gradients and AdamW state.
limits::ModelShape gpt2Xl()
{
    return {48, 25, 1600, 1024, 50257, 1557611200};
}

double maxAbsDifference(const std::vector<float>& a, const std::vector<float>& b)
{
    double worst = a.size() == b.size() ? 0.0 : std::numeric_limits<double>::infinity();
    for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i)
        worst = std::max(worst, double(std::abs(a[i] - b[i])));
    return worst;
}

net::InnerSettings innerSettings(uint64_t steps, uint64_t batch)
{
    net::InnerSettings inner;
    inner.steps = steps;
    inner.batchSize = batch;
    inner.blockSize = 32;
    inner.beta1 = 0.9;
    inner.beta2 = 0.95;
    inner.learningRate = 3e-3;
    inner.minLr = 3e-4;
    inner.warmupIters = 0;
    inner.gradClip = 1.0;
    inner.weightDecay = 0.1;
    return inner;
}

} // namespace

class TestDeviceTeam : public QObject {
    Q_OBJECT

private slots:
    void initTestCase()
    {
        QVERIFY2(std::filesystem::is_regular_file(kShakespeare),
            qPrintable(QStringLiteral("missing input: %1").arg(QString::fromUtf8(kShakespeare))));
    }

    // Data parallel while a sequence fits beside the whole state on one
    // device, ZeRO-3 when only a shard does, refused when not even that.
    void planPicksTheModeByMemory()
    {
        std::string why;
        auto plan = limits::planDevices(gpt2Xl(), 8, 2, 80 * kGiB, why);
        QVERIFY2(plan, why.c_str());
        QCOMPARE(plan->devices, 2);
        QVERIFY(plan->mode == limits::DeviceMode::DataParallel);
        QCOMPARE(plan->fixedBytes, limits::fixedTrainingBytes(gpt2Xl()));
        QVERIFY(plan->microBatch >= 1 && 4 % plan->microBatch == 0);

        // 25 GB of state does not fit a 24 GiB card; a quarter of it does.
        plan = limits::planDevices(gpt2Xl(), 8, 4, 24 * kGiB, why);
        QVERIFY2(plan, why.c_str());
        QCOMPARE(plan->devices, 4);
        QVERIFY(plan->mode == limits::DeviceMode::Sharded);
        QCOMPARE(plan->microBatch, int64_t(1));
        QVERIFY(plan->fixedBytes < limits::fixedTrainingBytes(gpt2Xl()) / 3);
        QCOMPARE(limits::shardedTrainingBytes(gpt2Xl(), 4) - limits::fixedTrainingBytes(gpt2Xl()) / 4,
            uint64_t(4 * (50257 + 1024 + 2) * 1600 + 8 * (12 * 1600 * 1600 + 13 * 1600)));

        QVERIFY(!plan->activationCheckpointing);
        // Two such cards hold half of it and one sequence's activations
        // (9.5 GB at T = 1024).
        plan = limits::planDevices(gpt2Xl(), 8, 2, 24 * kGiB, why);
        QVERIFY2(plan && plan->mode == limits::DeviceMode::Sharded && plan->microBatch == 1, why.c_str());
        QVERIFY(!plan->activationCheckpointing);
        // Four 12 GiB cards hold a quarter, but not a sequence's 9.5 GB of
        // activations beside it: only with checkpointing (1 GB a sequence).
        plan = limits::planDevices(gpt2Xl(), 8, 4, 12 * kGiB, why);
        QVERIFY2(plan && plan->mode == limits::DeviceMode::Sharded, why.c_str());
        QVERIFY(plan->activationCheckpointing);
        QVERIFY(limits::checkpointedBytesPerSequence(gpt2Xl()) < limits::bytesPerSequence(gpt2Xl()) / 8);
        // Two 12 GiB cards cannot hold half of the state; one 24 GiB card
        // only with 8-bit moments (tst_limits: planFitsGpt2ToOneCard).
        QVERIFY(!limits::planDevices(gpt2Xl(), 8, 2, 12 * kGiB, why));
        QVERIFY2(why.find("even sharded") != std::string::npos, why.c_str());
        plan = limits::planDevices(gpt2Xl(), 8, 1, 24 * kGiB, why);
        QVERIFY(plan && plan->int8Moments);

        // The batch splits evenly: 6 sequences on 4 offered devices use 3.
        plan = limits::planDevices(gpt2Xl(), 6, 4, 80 * kGiB, why);
        QVERIFY2(plan, why.c_str());
        QCOMPARE(plan->devices, 3);
        QCOMPARE(plan->microBatch, int64_t(2));
        // No budget known (the CPU): data parallel, each device's whole share at once.
        plan = limits::planDevices(gpt2Xl(), 8, 2, 0, why);
        QVERIFY(plan && plan->mode == limits::DeviceMode::DataParallel && plan->microBatch == 4);
        plan = limits::planDevices(gpt2Xl(), 8, 1, 0, why);
        QVERIFY(plan && plan->mode == limits::DeviceMode::Single && plan->microBatch == 8);
    }

    void teamMatchesOneDevice_data()
    {
        QTest::addColumn<int>("stage");
        QTest::addColumn<bool>("checkpointing");
        QTest::newRow("data parallel") << 0 << false;
        QTest::newRow("ZeRO-3") << 3 << false;
        QTest::newRow("ZeRO-3, activation checkpointing") << 3 << true;
    }

    // Two ranks of 4 rows against one device's Trainer on the same 8 rows,
    // from the same weights at the same rates: only the order of the sums
    // differs. A second start from other weights keeps AdamW's moments on
    // both sides.
    void teamMatchesOneDevice()
    {
        QFETCH(int, stage);
        QFETCH(bool, checkpointing);
        TrainOptions options = tinyModel({});
        options.cpuReplicas = 1;
        TrainData data;
        data.train = std::make_unique<ShakespeareSource>(options.model.blockSize, 1);
        auto single = Trainer::create(options, std::move(data));
        QVERIFY(single);
        const std::vector<float> theta = diloco::flatten((*single)->model());

        TrainOptions perDevice = options;
        perDevice.batchSize = 4;
        parallel::DeviceTeamOptions teamOptions{
            .devices = {"cpu", "cpu"}, .zeroStage = stage, .activationCheckpointing = checkpointing};
        auto team = parallel::DeviceTeam::create(
            perDevice, teamOptions, std::make_unique<ShakespeareSource>(options.model.blockSize, 1));
        QVERIFY2(team, team ? "" : team.error().message.c_str());
        QCOMPARE((*team)->size(), 2);
        QVERIFY((*team)->assign(theta.data(), int64_t(theta.size())));
        QCOMPARE((*team)->assign(theta.data(), int64_t(theta.size()) - 1).error().code, std::string("bad_size"));

        for (int i = 0; i < 3; ++i) {
            const StepReport one = (*single)->step(2e-3);
            const StepReport both = (*team)->step(2e-3);
            QVERIFY2(std::abs(one.loss - both.loss) < 1e-5,
                qPrintable(QStringLiteral("%1 vs %2").arg(one.loss).arg(both.loss)));
        }
        double apart = maxAbsDifference(diloco::flatten((*single)->model()), (*team)->flatten());
        qInfo("after 3 steps the weights are %.3g apart", apart);
        QVERIFY2(apart < 1e-5, qPrintable(QString::number(apart)));

        // A new task: back to theta, the moments kept, a new source.
        QVERIFY(diloco::assign((*single)->model(), theta.data(), int64_t(theta.size())));
        QVERIFY((*team)->assign(theta.data(), int64_t(theta.size())));
        (*single)->data().train = std::make_unique<ShakespeareSource>(options.model.blockSize, 5);
        (*team)->setSource(std::make_unique<ShakespeareSource>(options.model.blockSize, 5));
        for (int i = 0; i < 2; ++i) {
            (*single)->step(1e-3);
            (*team)->step(1e-3);
        }
        apart = maxAbsDifference(diloco::flatten((*single)->model()), (*team)->flatten());
        QVERIFY2(apart < 1e-5, qPrintable(QString::number(apart)));
        QCOMPARE((*team)->stepCount(), int64_t(5));
        if (!checkpointing)
            m_peaks[stage] = (*team)->peakStateBytes();
    }

    // ZeRO-3 holds a shard of the state (plus the units it gathers) where
    // data parallel holds all 16 bytes a parameter on each device.
    void shardingHoldsLessOnEachDevice()
    {
        QVERIFY(m_peaks.contains(0) && m_peaks.contains(3));
        qInfo("state per device: data parallel %lld bytes, ZeRO-3 %lld bytes", static_cast<long long>(m_peaks[0]),
            static_cast<long long>(m_peaks[3]));
        QVERIFY(m_peaks[3] < m_peaks[0]);
    }

    void badTeamsAreRefused()
    {
        const TrainOptions options = tinyModel({});
        auto source = [&] { return std::make_unique<ShakespeareSource>(options.model.blockSize, 1); };
        auto one = parallel::DeviceTeam::create(options, {.devices = {"cpu"}}, source());
        QVERIFY(!one);
        QCOMPARE(one.error().code, std::string("bad_options"));
        auto stage = parallel::DeviceTeam::create(options, {.devices = {"cpu", "cpu"}, .zeroStage = 4}, source());
        QVERIFY(!stage);
        auto device = parallel::DeviceTeam::create(options, {.devices = {"cpu", "tpu:0"}}, source());
        QVERIFY(!device);
        QCOMPARE(device.error().code, std::string("bad_device"));
    }

    // The volunteer's inner trainer: a task across two devices lands where
    // one device's does, counts the same tokens and says how it trained.
    void innerTrainerSplitsEachTask()
    {
        const TrainOptions base = tinyModel({});
        engine::GptConfig model = base.model;
        const net::InnerSettings inner = innerSettings(3, 8);
        torch::manual_seed(3);
        engine::Gpt reference(model);
        const std::vector<float> theta = diloco::flatten(reference);
        const std::atomic<bool> no{false};

        coreservice::InnerTrainer one(model, inner, "cpu", 1);
        auto single = one.run(theta, std::make_unique<ShakespeareSource>(model.blockSize, 2), 3, 0, no, no, {});
        QVERIFY2(single, single ? "" : single.error().message.c_str());

        // Each device's whole share (4 rows) in one pass: the source's
        // windows are drawn as one device draws them.
        volunteer::TrainingDevices devices{.device = "cpu", .team = {"cpu", "cpu"}, .zeroStage = 3, .microBatch = 0};
        coreservice::InnerTrainer two(model, inner, devices, 2);
        QCOMPARE(two.microBatch(), int64_t(4));
        int reports = 0;
        auto split = two.run(theta, std::make_unique<ShakespeareSource>(model.blockSize, 2), 3, 0, no, no,
            [&](const engine::StepReport&) { ++reports; });
        QVERIFY2(split, split ? "" : split.error().message.c_str());
        QCOMPARE(reports, 3);
        QCOMPARE(split->tokens, single->tokens);
        QCOMPARE(split->steps, uint64_t(3));
        QVERIFY(std::abs(split->meanLoss - single->meanLoss) < 1e-5);
        const double apart = maxAbsDifference(split->local, single->local);
        QVERIFY2(apart < 1e-5, qPrintable(QString::number(apart)));
        QCOMPARE(two.deviceName(), std::string("cpu,cpu"));
        QCOMPARE(two.parallelMode(), std::string("sharded"));
        QCOMPARE(one.parallelMode(), std::string());

        // A batch two devices cannot share evenly is refused, nothing trained.
        coreservice::InnerTrainer odd(model, innerSettings(3, 7), {.device = "cpu", .team = {"cpu", "cpu"}}, 2);
        auto refused = odd.run(theta, std::make_unique<ShakespeareSource>(model.blockSize, 2), 3, 0, no, no, {});
        QVERIFY(!refused);
        QCOMPARE(refused.error().code, std::string("bad_options"));
        QCOMPARE(odd.innerStepsTaken(), int64_t(0));
    }

    // One GPU under a memory budget: the planner's mode (checkpointing, 8-bit
    // moments, bf16 with a host master) reaches the core's trainer, and its
    // reason is the one `status` shows (memory_plan).
    void theOneDevicesMemoryPlanReachesTheCore()
    {
        const engine::GptConfig model = tinyModel({}).model;
        const net::InnerSettings inner = innerSettings(3, 8);
        const limits::ModelShape shape{model.nLayer, model.nHead, model.nEmbd, model.blockSize, model.vocabSize,
            int64_t(net::manifestElements(volunteer::wireManifestOf(model)))};
        volunteer::AgentOptions options;
        options.device = "cuda";
        const std::vector<std::string> core{"cpu", "cuda:0"};
        std::optional<uint64_t> int8Budget, hostMasterBudget;
        for (double budget = 1e9; budget > 1e5 && !hostMasterBudget; budget *= 0.97) {
            std::string why;
            auto plan = limits::planDevices(shape, 8, 1, uint64_t(budget), why);
            if (plan && plan->int8Moments && !plan->bf16HostMaster && !int8Budget)
                int8Budget = uint64_t(budget);
            if (plan && plan->bf16HostMaster)
                hostMasterBudget = uint64_t(budget);
        }
        QVERIFY(int8Budget && hostMasterBudget);

        options.gpuMemoryBudgetBytes = uint64_t(1) << 40;
        auto plain = volunteer::trainingDevicesFor(options, model, inner, core);
        QVERIFY2(plain, plain ? "" : plain.error().message.c_str());
        QVERIFY(!plain->int8Moments && !plain->activationCheckpointing);
        QVERIFY2(plain->reason.starts_with("plain"), plain->reason.c_str());

        options.gpuMemoryBudgetBytes = *int8Budget;
        auto eight = volunteer::trainingDevicesFor(options, model, inner, core);
        QVERIFY2(eight, eight ? "" : eight.error().message.c_str());
        QVERIFY(eight->int8Moments);
        QVERIFY(eight->team.empty());
        QVERIFY2(eight->reason.starts_with("8-bit AdamW moments"), eight->reason.c_str());

        options.gpuMemoryBudgetBytes = *hostMasterBudget;
        auto offloaded = volunteer::trainingDevicesFor(options, model, inner, core);
        QVERIFY2(offloaded, offloaded ? "" : offloaded.error().message.c_str());
        QVERIFY(offloaded->bf16HostMaster && offloaded->int8Moments && offloaded->activationCheckpointing);
        QVERIFY2(offloaded->reason.starts_with("bf16"), offloaded->reason.c_str());
        // The flag crosses to the core (docs/protocol.md §13 `train`).
        corelink::TrainRequest request;
        request.model = corelink::modelConfigOf(model);
        request.inner = inner;
        request.devices = *offloaded;
        request.elements = 1;
        request.steps = 1;
        request.thetaFile = request.windowsFile = request.localFile = "/tmp/x";
        const std::string bytes = request.encode().bytes();
        const corelink::Frame frame{std::string(corelink::type::kTrain), msgpack::unpack(bytes.data(), bytes.size())};
        auto decoded = corelink::TrainRequest::decode(frame);
        QVERIFY2(decoded, decoded ? "" : decoded.error().message.c_str());
        QVERIFY(decoded->devices.bf16HostMaster && decoded->devices.int8Moments);

        // The flags reach the trainer: 8-bit moments move the weights
        // otherwise than fp32 moments do, in much the same direction (the
        // tolerance of tst_trainer_memory's 8-bit case: apart by under 30 %
        // of plain's movement there, 50 % here after 3 steps).
        torch::manual_seed(3);
        engine::Gpt reference(model);
        const std::vector<float> theta = diloco::flatten(reference);
        const std::atomic<bool> no{false};
        coreservice::InnerTrainer fp32(model, inner, "cpu", 1);
        auto a = fp32.run(theta, std::make_unique<ShakespeareSource>(model.blockSize, 2), 3, 0, no, no, {});
        coreservice::InnerTrainer int8(
            model, inner, volunteer::TrainingDevices{.device = "cpu", .int8Moments = true}, 1);
        auto b = int8.run(theta, std::make_unique<ShakespeareSource>(model.blockSize, 2), 3, 0, no, no, {});
        QVERIFY(a && b);
        double moved = 0, apart = 0;
        for (std::size_t i = 0; i < theta.size(); ++i) {
            moved += double(a->local[i] - theta[i]) * double(a->local[i] - theta[i]);
            apart += double(b->local[i] - a->local[i]) * double(b->local[i] - a->local[i]);
        }
        QVERIFY2(apart > 0 && std::sqrt(apart / moved) < 0.5, qPrintable(QString::number(std::sqrt(apart / moved))));
    }

    // A task on bf16 weights with the fp32 master in host RAM reads theta
    // into the master and writes the master out (not the bf16 copy): at a
    // learning rate of 0 the master does not move, so the local weights
    // come back bit for bit, bits bf16 cannot hold included.
    void hostMasterTaskReadsAndWritesTheMaster()
    {
        const engine::GptConfig model = tinyModel({}).model;
        net::InnerSettings inner = innerSettings(2, 4);
        inner.learningRate = 0;
        inner.minLr = 0;
        torch::manual_seed(9);
        engine::Gpt reference(model);
        const std::vector<float> theta = diloco::flatten(reference);
        QTemporaryDir dir;
        const std::filesystem::path thetaFile = dir.filePath(QStringLiteral("theta.f32")).toStdString();
        const std::filesystem::path localFile = dir.filePath(QStringLiteral("local.f32")).toStdString();
        QVERIFY(diloco::writeFlatFile(reference, thetaFile));
        const std::atomic<bool> no{false};
        coreservice::InnerTrainer trainer(
            model, inner, volunteer::TrainingDevices{.device = "cpu", .int8Moments = true, .bf16HostMaster = true}, 1);
        auto ran = trainer.runFiles(thetaFile, theta.size(), localFile,
            std::make_unique<ShakespeareSource>(model.blockSize, 2), 2, 0, no, no, {});
        QVERIFY2(ran, ran ? "" : ran.error().message.c_str());
        QVERIFY(std::isfinite(ran->lastLoss) && ran->lastLoss > 0);
        std::vector<float> local(theta.size());
        std::ifstream in(localFile, std::ios::binary);
        in.read(reinterpret_cast<char*>(local.data()), std::streamsize(local.size() * sizeof(float)));
        QVERIFY(in);
        QCOMPARE(maxAbsDifference(local, theta), 0.0);
        // The in-memory path too.
        auto again = trainer.run(theta, std::make_unique<ShakespeareSource>(model.blockSize, 2), 1, 0, no, no, {});
        QVERIFY(again);
        QCOMPARE(maxAbsDifference(again->local, theta), 0.0);
    }

    // The devices a volunteer offers: those this libtorch cannot use are
    // left out, each GPU counts once, and fewer than two leave one device.
    void theVolunteerUsesTheDevicesItCan()
    {
        const engine::GptConfig model = tinyModel({}).model;
        const net::InnerSettings inner = innerSettings(3, 8);
        volunteer::AgentOptions options;
        options.devices = {"cpu", "tpu:0", "cpu"};
        // What a CPU core's hello lists.
        const std::vector<std::string> coreDevices{"cpu"};
        auto chosen = volunteer::trainingDevicesFor(options, model, inner, coreDevices);
        QVERIFY2(chosen, chosen ? "" : chosen.error().message.c_str());
        QCOMPARE(chosen->team, (std::vector<std::string>{"cpu", "cpu"}));
        QCOMPARE(chosen->zeroStage, 0);
        QCOMPARE(chosen->microBatch, int64_t(4));

        options.devices = {"cpu", "cpu", "cpu"}; // 8 rows split over 2 of the 3
        chosen = volunteer::trainingDevicesFor(options, model, inner, coreDevices);
        QVERIFY(chosen);
        QCOMPARE(chosen->team.size(), std::size_t(2));

        options.devices = {"cuda:0", "cuda:1"}; // a core without CUDA: the one device
        chosen = volunteer::trainingDevicesFor(options, model, inner, coreDevices);
        QVERIFY(chosen);
        QVERIFY(chosen->team.empty());
        QCOMPARE(chosen->device, std::string("cpu"));
        QCOMPARE(chosen->microBatch, int64_t(8));

        // A GPU asked for and a core that has none (the CPU core, a CUDA core
        // without a driver): training goes on on the CPU.
        options.devices = {};
        for (const char* asked : {"cuda", "cuda:1", "auto"}) {
            options.device = asked;
            chosen = volunteer::trainingDevicesFor(options, model, inner, coreDevices);
            QVERIFY(chosen);
            QCOMPARE(chosen->device, std::string("cpu"));
        }
        options.device = "cuda";
        chosen = volunteer::trainingDevicesFor(options, model, inner, {"cpu", "cuda:0"});
        QVERIFY(chosen);
        QCOMPARE(chosen->device, std::string("cuda"));

        // A CUDA core with two GPUs: "cuda" is GPU 0, each GPU once, unknown ones left out.
        options.devices = {"cuda", "cuda:0", "cuda:1", "cuda:7"};
        chosen = volunteer::trainingDevicesFor(options, model, inner, {"cpu", "cuda:0", "cuda:1"});
        QVERIFY(chosen);
        QCOMPARE(chosen->team, (std::vector<std::string>{"cuda:0", "cuda:1"}));
    }

    // A volunteer told to use two devices trains a real coordinator's tasks
    // across them; the coordinator accepts them and the summary says how.
    void agentTrainsAcrossTwoDevices()
    {
        QTemporaryDir tmp;
        QVERIFY(tmp.isValid());
        const std::filesystem::path root = tmp.path().toStdString();
        const auto data = preparedText(root / "prepared");
        SpecOptions spec;
        spec.innerSteps = 4;
        spec.batchSize = 4;
        spec.tasksPerRound = 1;
        ServerProcess server;
        QVERIFY(server.start(writeSpec(root / "spec", data, spec), root / "state", 300));

        volunteer::AgentOptions options;
        options.endpoint = server.endpoint;
        options.serverKey = server.publicKey;
        options.project = "tiny";
        options.dataDir = root / "volunteer";
        options.threads = 2;
        options.devices = {"cpu", "cpu"};
        options.maxTasks = 2;
        volunteer::VolunteerAgent agent(options);
        Status ran = Status::success();
        std::thread runner([&] { ran = agent.run(); });
        runner.join();
        QVERIFY2(ran, ran ? "" : ran.error().message.c_str());
        const volunteer::AgentSummary summary = agent.summary();
        QCOMPARE(summary.tasks, uint64_t(2));
        QVERIFY(summary.accepted >= 1);
        QCOMPARE(summary.deviceName, std::string("cpu,cpu"));
        QCOMPARE(summary.parallelMode, std::string("data_parallel"));
        QCOMPARE(summary.microBatch, int64_t(2));
        QCOMPARE(summary.tokens, uint64_t(2 * 4 * 4) * uint64_t(32));
    }

private:
    std::map<int, int64_t> m_peaks;
};

QTEST_GUILESS_MAIN(TestDeviceTeam)
#include "tst_device_team.moc"
