// Trainer: schedule, the fused AdamW and gradient kernels, falling loss on
// Tiny Shakespeare, determinism, CPU replicas against one replica, bit-exact
// resume, a non-finite gradient, bad checkpoints, pause/abort, and c10d Gloo
// data parallel equivalence (2 processes on loopback against 1 process with
// twice the batch).
#include "engine/cpu_kernels.h"
#include "engine/data_parallel.h"
#include "engine/fused_update.h"
#include "engine/op_count.h"
#include "engine/trainer.h"

#include "free_port.h"
#include <QProcess>
#include <QScopeGuard>
#include <QTemporaryDir>
#include <QTest>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>

#include <netinet/in.h>
#include <numeric>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

using namespace crowdtrain::engine;
using crowdtrain::Status;

using crowdtrain::testing::freePort;

namespace {

const char* const kShakespeare = CROWDTRAIN_SHARED_DATA_DIR "/tinyshakespeare.txt";

// Tiny Shakespeare as byte ids (< 128 for this ASCII text), in random windows
// from a counter-based generator so a position fixes the stream.
class ShakespeareSource : public BatchSource {
public:
    ShakespeareSource(int64_t blockSize, uint64_t seed, bool validation)
        : m_blockSize(blockSize)
        , m_seed(seed)
    {
        std::ifstream in(kShakespeare, std::ios::binary);
        if (!in)
            qFatal("cannot read %s", kShakespeare);
        const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        const std::size_t split = text.size() * 9 / 10;
        const std::string part = validation ? text.substr(split) : text.substr(0, split);
        m_tokens.assign(part.begin(), part.end());
        // next() picks windows of blockSize + 1 tokens, ids below the
        // vocabulary of tinyOptions() (128).
        if (m_tokens.size() <= std::size_t(m_blockSize) + 1)
            qFatal("%s: %zu bytes of %s text, too few for windows of %lld", kShakespeare, part.size(),
                validation ? "validation" : "training", static_cast<long long>(m_blockSize + 1));
        for (const unsigned char token : m_tokens)
            if (token >= 128)
                qFatal("%s: byte %u is not ASCII", kShakespeare, unsigned(token));
    }

    void next(int64_t batch, int64_t* x, int64_t* y) override
    {
        for (int64_t row = 0; row < batch; ++row) {
            const uint64_t r = mix(m_seed ^ mix(m_position * 1000003ull + uint64_t(row)));
            const std::size_t start = r % (m_tokens.size() - std::size_t(m_blockSize) - 1);
            for (int64_t i = 0; i < m_blockSize; ++i) {
                x[row * m_blockSize + i] = m_tokens[start + std::size_t(i)];
                y[row * m_blockSize + i] = m_tokens[start + std::size_t(i) + 1];
            }
        }
        ++m_position;
    }
    uint64_t position() const override { return m_position; }
    void setPosition(uint64_t p) override { m_position = p; }
    int64_t blockSize() const override { return m_blockSize; }

private:
    static uint64_t mix(uint64_t z)
    {
        z += 0x9e3779b97f4a7c15ull;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }

    int64_t m_blockSize;
    uint64_t m_seed;
    uint64_t m_position = 0;
    std::vector<unsigned char> m_tokens;
};

TrainOptions tinyOptions()
{
    TrainOptions o;
    o.model.nLayer = 2;
    o.model.nHead = 2;
    o.model.nEmbd = 64;
    o.model.blockSize = 32;
    o.model.vocabSize = 128;
    o.batchSize = 8;
    o.maxIters = 20;
    o.schedule = {.learningRate = 3e-3, .minLr = 3e-4, .warmupIters = 5, .lrDecayIters = 200, .decayLr = true};
    o.evalInterval = 0;
    o.evalIters = 4;
    o.device = "cpu";
    return o;
}

TrainData shakespeare(int64_t blockSize, uint64_t seed = 1)
{
    TrainData data;
    data.train = std::make_unique<ShakespeareSource>(blockSize, seed, false);
    data.trainEval = std::make_unique<ShakespeareSource>(blockSize, seed + 100, false);
    data.val = std::make_unique<ShakespeareSource>(blockSize, seed + 200, true);
    return data;
}

std::unique_ptr<Trainer> makeTrainer(const TrainOptions& options, std::shared_ptr<DataParallel> parallel = nullptr)
{
    auto trainer = Trainer::create(options, shakespeare(options.model.blockSize), std::move(parallel));
    if (!trainer)
        qFatal("%s", trainer.error().message.c_str());
    return std::move(trainer).value();
}

// Pause, resume and stop asked from any thread, honoured where the trainer
// asks before each step (Callbacks::beforeStep): the shape a caller's gate
// takes (the daemon's is PauseGate). Thread-safe.
class StepGate {
public:
    void pause()
    {
        std::lock_guard lock(m_mutex);
        m_paused = true;
    }
    void resume()
    {
        set([this] { m_paused = false; });
    }
    void stop()
    {
        set([this] { m_stopped = true; });
    }
    // Blocks while paused; false once stopped.
    bool wait()
    {
        std::unique_lock lock(m_mutex);
        m_changed.wait(lock, [this] { return !m_paused || m_stopped; });
        return !m_stopped;
    }

private:
    template <typename Change> void set(Change change)
    {
        {
            std::lock_guard lock(m_mutex);
            change();
        }
        m_changed.notify_all();
    }

    std::mutex m_mutex;
    std::condition_variable m_changed;
    bool m_paused = false;
    bool m_stopped = false;
};

bool sameParameters(Trainer& a, Trainer& b)
{
    const auto pa = a.model()->parameters();
    const auto pb = b.model()->parameters();
    for (std::size_t i = 0; i < pa.size(); ++i)
        if (!torch::equal(pa[i], pb[i]))
            return false;
    return true;
}

// One rank of the data-parallel check, run in a child process: trains with
// `replicas` CPU replicas and writes its parameters to `out`.
int runRank(int rank, int world, int port, int batch, int replicas, const std::string& out)
{
    TrainOptions options = tinyOptions();
    options.batchSize = batch;
    options.cpuReplicas = replicas;
    options.maxIters = 4;
    std::shared_ptr<DataParallel> parallel;
    if (world > 1) {
        auto created = DataParallel::create({.rank = rank, .worldSize = world, .port = uint16_t(port)});
        if (!created) {
            std::fprintf(stderr, "%s\n", created.error().message.c_str());
            return 3;
        }
        parallel = *created;
    }
    auto trainer = makeTrainer(options, parallel);
    for (int i = 0; i < options.maxIters; ++i)
        trainer->step();
    torch::save(trainer->model()->parameters(), out);
    return 0;
}

} // namespace

class TestTrainer : public QObject {
    Q_OBJECT

private slots:
    void initTestCase()
    {
        torch::set_num_threads(1);
        QVERIFY2(std::filesystem::is_regular_file(kShakespeare),
            qPrintable(QStringLiteral("missing input: %1").arg(QString::fromUtf8(kShakespeare))));
    }

    void schedule_data()
    {
        QTest::addColumn<qint64>("step");
        QTest::addColumn<double>("expected");
        // lr 1e-3, min 1e-4, warmup 100, decay until 2000 (nanoGPT's Shakespeare run).
        QTest::newRow("first warmup step") << qint64(0) << 1e-3 * 1 / 101;
        QTest::newRow("mid warmup") << qint64(49) << 1e-3 * 50 / 101;
        QTest::newRow("peak") << qint64(100) << 1e-3;
        QTest::newRow("half-way cosine") << qint64(1050) << 1e-4 + 0.5 * (1e-3 - 1e-4);
        QTest::newRow("end of decay") << qint64(2000) << 1e-4;
        QTest::newRow("after decay") << qint64(5000) << 1e-4;
    }

    void schedule()
    {
        QFETCH(qint64, step);
        QFETCH(double, expected);
        const LrSchedule s{.learningRate = 1e-3, .minLr = 1e-4, .warmupIters = 100, .lrDecayIters = 2000};
        QVERIFY(std::abs(learningRateAt(step, s) - expected) < 1e-12);
        QCOMPARE(learningRateAt(step, {.learningRate = 5e-4, .decayLr = false}), 5e-4);
    }

    void rejectsBadOptions()
    {
        TrainOptions options = tinyOptions();
        options.model.nHead = 3;
        auto trainer = Trainer::create(options, shakespeare(32));
        QVERIFY(!trainer.ok());
        options = tinyOptions();
        auto mismatch = Trainer::create(options, shakespeare(16));
        QVERIFY(!mismatch.ok());
        QVERIFY(mismatch.error().message.find("block_size") != std::string::npos);
        options.device = "tpu";
        QVERIFY(!Trainer::create(options, shakespeare(32)).ok());
    }

    // The fused AdamW step against libtorch's own, on the same gradients:
    // weights and moments agree to float rounding, step after step; also
    // when run in uneven slices (as the CPU replicas' threads run it) and
    // with a clipping coefficient folded in.
    void fusedAdamWMatchesLibtorch_data()
    {
        QTest::addColumn<int>("slices");
        QTest::addColumn<double>("gradScale");
        QTest::newRow("fusedAdamWStep") << 0 << 1.0;
        QTest::newRow("3 slices") << 3 << 1.0;
        QTest::newRow("7 slices, scale 0.3") << 7 << 0.3;
    }

    void fusedAdamWMatchesLibtorch()
    {
        QFETCH(int, slices);
        QFETCH(double, gradScale);
        using namespace crowdtrain::engine;
        GptConfig c = tinyOptions().model;
        torch::manual_seed(3);
        Gpt a(c);
        Gpt b(c);
        {
            torch::NoGradGuard noGrad;
            const auto pa = a->parameters(), pb = b->parameters();
            for (std::size_t i = 0; i < pa.size(); ++i)
                pb[i].copy_(pa[i]);
        }
        auto optimizerFor = [](Gpt& m) {
            std::vector<torch::optim::OptimizerParamGroup> groups;
            auto decayed = std::make_unique<torch::optim::AdamWOptions>(3e-3);
            decayed->betas({0.9, 0.99}).weight_decay(0.1);
            auto plain = std::make_unique<torch::optim::AdamWOptions>(3e-3);
            plain->betas({0.9, 0.99}).weight_decay(0.0);
            groups.emplace_back(m->decayedParameters(), std::move(decayed));
            groups.emplace_back(m->undecayedParameters(), std::move(plain));
            return torch::optim::AdamW(std::move(groups), torch::optim::AdamWOptions(3e-3));
        };
        auto stock = optimizerFor(a);
        auto fused = optimizerFor(b);
        for (int step = 0; step < 5; ++step) {
            const auto pa = a->parameters(), pb = b->parameters();
            for (std::size_t i = 0; i < pa.size(); ++i) {
                const auto g = torch::randn_like(pa[i]);
                pa[i].mutable_grad() = g * gradScale;
                pb[i].mutable_grad() = g.clone();
            }
            stock.step();
            if (slices == 0) {
                fusedAdamWStep(fused);
            } else {
                FusedAdamW update;
                QVERIFY(update.prepare(fused, float(gradScale)));
                // Cuts that fall inside tensors, at their edges, and a tail.
                for (int k = 0; k < slices; ++k)
                    update.run(update.size() * k * k / (slices * slices),
                        update.size() * (k + 1) * (k + 1) / (slices * slices));
            }
            for (std::size_t i = 0; i < pa.size(); ++i)
                QVERIFY2(torch::allclose(pa[i], pb[i], 1e-5, 1e-7), qPrintable(QString::number(step)));
        }
        QCOMPARE(fused.state().size(), stock.state().size());
    }

    void forEachPieceCoversEveryElementOnce()
    {
        const std::vector<int64_t> sizes{5, 0, 17, 3, 1};
        const int64_t total = 26;
        for (int parts = 1; parts <= 5; ++parts) {
            std::vector<int> seen(std::size_t(total), 0);
            for (int k = 0; k < parts; ++k)
                forEachPiece(
                    sizes, total * k / parts, total * (k + 1) / parts, [&](std::size_t j, int64_t at, int64_t count) {
                        QVERIFY(count > 0 && at >= 0 && at + count <= sizes[j]);
                        const int64_t start = std::accumulate(sizes.begin(), sizes.begin() + long(j), int64_t(0));
                        for (int64_t i = 0; i < count; ++i)
                            ++seen[std::size_t(start + at + i)];
                    });
            QCOMPARE(std::count(seen.begin(), seen.end(), 1), long(total));
        }
    }

    void gradientKernels()
    {
        for (int64_t n : {0, 1, 15, 16, 17, 1000, 4099}) {
            const torch::Tensor a = torch::randn({n}), b = torch::randn({n});
            const double expected = a.to(torch::kDouble).square().sum().item<double>();
            QVERIFY(std::abs(sumOfSquares(a.data_ptr<float>(), n) - expected) <= 1e-6 * (expected + 1));
            torch::Tensor sum = a.clone();
            addInto(sum.data_ptr<float>(), b.data_ptr<float>(), n);
            QVERIFY(torch::equal(sum, a + b));
        }
    }

    void lossFallsOnShakespeare()
    {
        TrainOptions options = tinyOptions();
        options.maxIters = 120;
        auto trainer = makeTrainer(options);
        const double before = trainer->evaluateAll().valLoss;
        std::vector<StepReport> steps;
        const auto onStep = [&](const StepReport& r) { steps.push_back(r); };
        QVERIFY(trainer->run({.onStep = onStep, .onEval = {}, .beforeStep = {}}).ok());
        const double after = trainer->evaluateAll().valLoss;
        QCOMPARE(int(steps.size()), 120);
        QCOMPARE(steps.back().tokensSeen, int64_t(120 * 8 * 32));
        QVERIFY(steps.back().tokensPerSecond > 0);
        QVERIFY2(after < before - 1.5, qPrintable(QStringLiteral("%1 -> %2").arg(before).arg(after)));
    }

    void deterministicForASeed()
    {
        auto a = makeTrainer(tinyOptions());
        auto b = makeTrainer(tinyOptions());
        for (int i = 0; i < 3; ++i) {
            QCOMPARE(a->step().loss, b->step().loss);
        }
        QVERIFY(sameParameters(*a, *b));
    }

    void resumeIsBitExact_data()
    {
        QTest::addColumn<bool>("syncFree");
        QTest::newRow("CPU kernels") << false;
        QTest::newRow("sync-free update") << true;
    }

    void resumeIsBitExact()
    {
        QFETCH(bool, syncFree);
        QTemporaryDir dir;
        const std::string file = dir.filePath(QStringLiteral("state.ckpt")).toStdString();
        TrainOptions options = tinyOptions();
        options.syncFreeUpdate = syncFree;
        auto straight = makeTrainer(options);
        for (int i = 0; i < 8; ++i)
            straight->step();

        auto first = makeTrainer(options);
        for (int i = 0; i < 4; ++i)
            first->step();
        QVERIFY(first->saveState(file).ok());
        first.reset();

        TrainOptions other = options;
        other.seed = 99; // different initial weights: everything must come from the file
        auto resumed = makeTrainer(other);
        const Status loaded = resumed->loadState(file);
        QVERIFY2(loaded.ok(), loaded.ok() ? "" : loaded.error().message.c_str());
        QCOMPARE(resumed->stepCount(), int64_t(4));
        for (int i = 0; i < 4; ++i)
            resumed->step();
        QVERIFY(sameParameters(*straight, *resumed));
        QCOMPARE(resumed->tokensSeen(), straight->tokensSeen());
    }

    // The CPU replicas split each batch's rows between threads and sum their
    // gradients; the update must be the one a single replica makes, with
    // clipping active, with accumulation, and with rows that do not divide.
    void cpuReplicasMatchOneReplica_data()
    {
        QTest::addColumn<int>("replicas");
        QTest::addColumn<int>("accumulation");
        QTest::newRow("2 replicas") << 2 << 1;
        QTest::newRow("3 replicas, rows 3+3+2") << 3 << 1;
        QTest::newRow("2 replicas, 2 micro-batches") << 2 << 2;
    }

    void cpuReplicasMatchOneReplica()
    {
        QFETCH(int, replicas);
        QFETCH(int, accumulation);
        TrainOptions options = tinyOptions();
        options.gradAccumulationSteps = accumulation;
        options.gradClip = 0.5; // below the early gradient norms, so clipping acts
        options.cpuReplicas = 1;
        auto single = makeTrainer(options);
        options.cpuReplicas = replicas;
        auto team = makeTrainer(options);
        bool clipped = false;
        for (int i = 0; i < 6; ++i) {
            const StepReport a = single->step();
            const StepReport b = team->step();
            QVERIFY2(std::abs(a.loss - b.loss) < 1e-5, qPrintable(QString::number(a.loss - b.loss)));
            QVERIFY(std::abs(a.gradNorm - b.gradNorm) < 1e-4 * a.gradNorm);
            clipped = clipped || a.gradNorm > options.gradClip;
        }
        QVERIFY(clipped);
        const auto pa = single->model()->parameters(), pb = team->model()->parameters();
        for (std::size_t i = 0; i < pa.size(); ++i)
            QVERIFY2(torch::allclose(pa[i], pb[i], 1e-4, 1e-5), qPrintable(QString::number(i)));
    }

    // A state loaded into a trainer with replicas reaches all of them (the
    // replicas take the primary's weights at each step), so resuming stays
    // bit-exact there too.
    void replicatedResumeIsBitExact()
    {
        QTemporaryDir dir;
        const std::string file = dir.filePath(QStringLiteral("state.ckpt")).toStdString();
        TrainOptions options = tinyOptions();
        options.cpuReplicas = 2;
        auto straight = makeTrainer(options);
        for (int i = 0; i < 6; ++i)
            straight->step();
        auto first = makeTrainer(options);
        for (int i = 0; i < 3; ++i)
            first->step();
        QVERIFY(first->saveState(file).ok());
        options.seed = 99;
        auto resumed = makeTrainer(options);
        for (int i = 0; i < 2; ++i) // the replicas hold weights of their own now
            resumed->step();
        QVERIFY(resumed->loadState(file).ok());
        for (int i = 0; i < 3; ++i)
            resumed->step();
        QVERIFY(sameParameters(*straight, *resumed));
    }

    // A non-finite gradient leaves weights and optimizer alone, on both
    // update paths, and the report shows it.
    void nonFiniteGradientSkipsTheUpdate_data()
    {
        QTest::addColumn<int>("replicas");
        QTest::addColumn<bool>("syncFree");
        QTest::newRow("1 replica") << 1 << false;
        QTest::newRow("2 replicas") << 2 << false;
        QTest::newRow("sync-free update") << 1 << true;
    }

    void nonFiniteGradientSkipsTheUpdate()
    {
        QFETCH(int, replicas);
        QFETCH(bool, syncFree);
        TrainOptions options = tinyOptions();
        options.cpuReplicas = replicas;
        options.syncFreeUpdate = syncFree;
        auto trainer = makeTrainer(options);
        trainer->step();
        const auto params = trainer->model()->parameters();
        {
            torch::NoGradGuard noGrad;
            params[0].view(-1)[0] = std::nan(""); // the token embedding, tied to the head
        }
        std::vector<torch::Tensor> before;
        for (const auto& p : params)
            before.push_back(p.clone());
        const auto& state = trainer->optimizer().state();
        const auto stepsBefore = static_cast<torch::optim::AdamWParamState&>(*state.begin()->second).step();
        const StepReport report = trainer->step();
        QVERIFY(!std::isfinite(report.gradNorm));
        for (std::size_t i = 0; i < params.size(); ++i)
            QVERIFY(torch::equal(params[i], before[i]) || i == 0);
        QVERIFY(torch::equal(params[0].view(-1).slice(0, 1), before[0].view(-1).slice(0, 1)));
        QCOMPARE(static_cast<torch::optim::AdamWParamState&>(*state.begin()->second).step(), stepsBefore);
    }

    // The update a GPU runs (the norm, clipping and the non-finite skip as
    // tensors), run here on the CPU, against the CPU's own kernels: the same
    // losses, norms and weights to float rounding, with clipping acting and
    // two micro-batches a step.
    void syncFreeUpdateMatchesCpuKernels()
    {
        TrainOptions options = tinyOptions();
        options.gradAccumulationSteps = 2;
        options.gradClip = 0.5;
        options.cpuReplicas = 1;
        auto cpu = makeTrainer(options);
        options.syncFreeUpdate = true;
        auto syncFree = makeTrainer(options);
        bool clipped = false;
        for (int i = 0; i < 6; ++i) {
            const StepReport a = cpu->step();
            const StepReport b = syncFree->step();
            QVERIFY2(std::abs(a.loss - b.loss) < 1e-5, qPrintable(QString::number(a.loss - b.loss)));
            QVERIFY2(std::abs(a.gradNorm - b.gradNorm) < 1e-4 * a.gradNorm, qPrintable(QString::number(i)));
            clipped = clipped || a.gradNorm > options.gradClip;
        }
        QVERIFY(clipped);
        const auto pa = cpu->model()->parameters(), pb = syncFree->model()->parameters();
        for (std::size_t i = 0; i < pa.size(); ++i)
            QVERIFY2(torch::allclose(pa[i], pb[i], 1e-4, 1e-5), qPrintable(QString::number(i)));
        for (const auto& p : pb)
            QCOMPARE(adamWStateOf(syncFree->optimizer(), p).step(), int64_t(6));
    }

    // Issue 41 item 5: nothing is read back to the host inside a step (on
    // CUDA each read waits for the device's queue to drain). The GPU's path,
    // run here on the CPU, reads once, at the step's end; the CPU's own
    // kernels add clip_grad_norm_'s read of the norm (no wait on a CPU).
    // Before, every micro-batch read its loss. Also records the step's ATen
    // operator calls (nested ones included), a proxy for kernel launches.
    void hostReadsPerStep_data()
    {
        QTest::addColumn<bool>("syncFree");
        QTest::addColumn<int>("midStepReads");
        QTest::newRow("CPU kernels") << false << 1;
        QTest::newRow("sync-free update (CUDA's path)") << true << 0;
    }

    void hostReadsPerStep()
    {
        QFETCH(bool, syncFree);
        QFETCH(int, midStepReads);
        TrainOptions options = tinyOptions();
        options.gradAccumulationSteps = 4;
        options.cpuReplicas = 1;
        options.syncFreeUpdate = syncFree;
        auto trainer = makeTrainer(options);
        trainer->step(); // the first step creates the optimizer's state
        const int steps = 3;
        OpCount count;
        for (int i = 0; i < steps; ++i)
            trainer->step();
        const OpCounts counts = count.counts();
        qInfo("%s, 4 micro-batches, 2 layers: %lld ATen operator calls per step, %lld host reads mid-step, "
              "%lld at the end",
            QTest::currentDataTag(), static_cast<long long>(counts.ops / steps),
            static_cast<long long>(counts.hostReads / steps), static_cast<long long>(counts.stepReads / steps));
        QCOMPARE(counts.stepReads, int64_t(steps));
        QCOMPARE(counts.hostReads, int64_t(midStepReads * steps));
        QVERIFY(counts.ops > 0);
    }

    void badStateFiles_data()
    {
        QTest::addColumn<QString>("damage");
        QTest::addColumn<QString>("message");
        QTest::newRow("truncated") << QStringLiteral("truncate") << QStringLiteral("truncated");
        QTest::newRow("bad magic") << QStringLiteral("magic") << QStringLiteral("bad magic");
        QTest::newRow("future version") << QStringLiteral("version") << QStringLiteral("version");
        QTest::newRow("flipped byte") << QStringLiteral("flip") << QStringLiteral("checksum");
        QTest::newRow("other model") << QStringLiteral("model") << QStringLiteral("saved for model");
        QTest::newRow("missing") << QStringLiteral("missing") << QStringLiteral("no such file");
    }

    void badStateFiles()
    {
        QFETCH(QString, damage);
        QFETCH(QString, message);
        QTemporaryDir dir;
        const std::string file = dir.filePath(QStringLiteral("state.ckpt")).toStdString();
        TrainOptions options = tinyOptions();
        if (damage == QLatin1String("model"))
            options.model.nEmbd = 32;
        auto saver = makeTrainer(options);
        saver->step();
        QVERIFY(saver->saveState(file).ok());

        std::string bytes;
        {
            std::ifstream in(file, std::ios::binary);
            bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
        }
        // The damage below writes up to byte 8.
        QVERIFY2(bytes.size() > 8,
            qPrintable(QStringLiteral("%1 holds %2 bytes").arg(QString::fromStdString(file)).arg(bytes.size())));
        if (damage == QLatin1String("truncate"))
            bytes.resize(bytes.size() / 2);
        else if (damage == QLatin1String("magic"))
            bytes[0] = 'X';
        else if (damage == QLatin1String("version"))
            bytes[8] = 9;
        else if (damage == QLatin1String("flip"))
            bytes[bytes.size() / 2] ^= 0x40;
        std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
        if (damage == QLatin1String("missing"))
            std::filesystem::remove(file);

        auto loader = makeTrainer(tinyOptions());
        const auto before = loader->model()->parameters()[0].clone();
        const Status status = loader->loadState(file);
        QVERIFY(!status.ok());
        QVERIFY2(QString::fromStdString(status.error().message).contains(message), status.error().message.c_str());
        QVERIFY(QString::fromStdString(status.error().message).contains(QStringLiteral("state.ckpt")));
        QCOMPARE(loader->stepCount(), int64_t(0));
        QVERIFY(torch::equal(before, loader->model()->parameters()[0]));
    }

    // A pause asked for during step 3 (from its own callback, so no timing
    // decides where it lands) holds the trainer after step 3 until resumed,
    // through beforeStep; a stop ends the run after the step in progress.
    void pauseAndAbortAtStepBoundaries()
    {
        TrainOptions options = tinyOptions();
        options.maxIters = 100000;
        auto trainer = makeTrainer(options);
        StepGate gate;
        std::atomic<int64_t> steps{0};
        std::atomic<bool> ranOk{false};
        std::thread worker([&] {
            const auto onStep = [&](const StepReport& r) {
                steps = r.step;
                if (r.step == 3)
                    gate.pause();
            };
            ranOk = trainer->run({.onStep = onStep, .onEval = {}, .beforeStep = [&] { return gate.wait(); }}).ok();
        });
        // Whatever a check below decides, the worker is stopped and joined.
        auto stop = qScopeGuard([&] {
            gate.stop();
            worker.join();
        });
        QTRY_VERIFY2_WITH_TIMEOUT(steps >= 3, "the trainer did not reach step 3 within 60 s", 60000);
        // Held: no step in a while (a window to observe, not a wait for
        // something to happen).
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        QCOMPARE(int64_t(steps), int64_t(3)); // no step while paused
        gate.resume();
        QTRY_VERIFY2_WITH_TIMEOUT(steps >= 5, "the trainer did not go on to step 5 within 60 s of resuming", 60000);
        gate.stop();
        worker.join();
        stop.dismiss();
        QVERIFY(ranOk);
        QVERIFY(trainer->stepCount() < options.maxIters);
        QCOMPARE(trainer->stepCount(), int64_t(steps)); // the last step finished and was reported
    }

    // Options the build cannot serve fail at once, before any rendezvous
    // (which would otherwise wait for the other ranks until its timeout).
    void dataParallelRejectsBadOptions()
    {
        auto unknown = DataParallel::create({.rank = 0, .worldSize = 2, .backend = "mpi"});
        QVERIFY(!unknown.ok());
        QVERIFY(unknown.error().message.find("'mpi' is not in this build") != std::string::npos);
        auto outside = DataParallel::create({.rank = 2, .worldSize = 2});
        QVERIFY(!outside.ok());
        QCOMPARE(QString::fromStdString(outside.error().code), QStringLiteral("bad_options"));
        auto ncclOnCpu = DataParallel::create({.rank = 0, .worldSize = 2, .backend = "nccl"});
        QVERIFY(!ncclOnCpu.ok());
    }

    // 2 ranks x batch 4 through Gloo give the update of 1 rank x batch 8;
    // also when each rank splits its rows between CPU replicas (the
    // all-reduce then sits between the replicas' gradient sum and the norm).
    void glooDataParallelMatchesDoubleBatch_data()
    {
        QTest::addColumn<int>("replicas");
        QTest::newRow("1 replica per rank") << 1;
        QTest::newRow("2 replicas per rank") << 2;
    }

    void glooDataParallelMatchesDoubleBatch()
    {
        QFETCH(int, replicas);
        QTemporaryDir dir;
        const QString self = QCoreApplication::applicationFilePath();
        const int port = freePort(); // rank 0 hosts the rendezvous store there
        auto launch = [&](int rank, int world, int batch, int rankReplicas, const QString& out) {
            auto* process = new QProcess(this);
            process->setProcessChannelMode(QProcess::ForwardedChannels);
            process->start(self,
                {QStringLiteral("--rank"), QString::number(rank), QString::number(world), QString::number(port),
                    QString::number(batch), QString::number(rankReplicas), out});
            return process;
        };
        const QString single = dir.filePath(QStringLiteral("single.pt"));
        const QString rank0 = dir.filePath(QStringLiteral("rank0.pt"));
        const QString rank1 = dir.filePath(QStringLiteral("rank1.pt"));
        QList<QProcess*> processes{
            launch(0, 1, 8, 1, single), launch(0, 2, 4, replicas, rank0), launch(1, 2, 4, replicas, rank1)};
        for (QProcess* p : processes) {
            QVERIFY(p->waitForFinished(300000));
            QCOMPARE(p->exitStatus(), QProcess::NormalExit);
            QCOMPARE(p->exitCode(), 0);
        }
        std::vector<torch::Tensor> a, b, c;
        torch::load(a, single.toStdString());
        torch::load(b, rank0.toStdString());
        torch::load(c, rank1.toStdString());
        QCOMPARE(a.size(), b.size());
        double worst = 0;
        for (std::size_t i = 0; i < a.size(); ++i) {
            QVERIFY(torch::equal(b[i], c[i])); // ranks stay in lock-step
            worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>());
        }
        QVERIFY2(worst < 1e-5, qPrintable(QString::number(worst)));
        // ...and training actually moved the weights.
        TrainOptions options = tinyOptions();
        auto fresh = makeTrainer(options);
        QVERIFY(!torch::allclose(fresh->model()->parameters()[0], a[0]));
    }
};

int main(int argc, char** argv)
{
    if (argc == 8 && std::string(argv[1]) == "--rank") {
        torch::set_num_threads(1);
        return runRank(std::atoi(argv[2]), std::atoi(argv[3]), std::atoi(argv[4]), std::atoi(argv[5]),
            std::atoi(argv[6]), argv[7]);
    }
    QCoreApplication app(argc, argv);
    TestTrainer test;
    return QTest::qExec(&test, argc, argv);
}

#include "tst_trainer.moc"
