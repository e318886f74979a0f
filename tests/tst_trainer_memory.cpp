// The trainer's memory options on real text (Tiny Shakespeare bytes):
// activation checkpointing per block must train exactly as the plain
// passes do (losses and weights within 1e-5 after several steps, with one
// CPU replica and with two, with gradient accumulation); gradients released
// between runs come back on the next step; AdamW with 8-bit moments keeps
// each moment within its map's relative step, takes plain AdamW's first step
// exactly and trains as plain AdamW does within the tolerance argued at
// int8MomentsTrainLikePlain.
#include "engine/adamw8bit.h"
#include "engine/checkpointing.h"
#include "engine/trainer.h"

#include <QTest>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

using namespace crowdtrain::engine;

namespace {

const char* const kShakespeare = CROWDTRAIN_SHARED_DATA_DIR "/tinyshakespeare.txt";

// Consecutive windows of Tiny Shakespeare's bytes, each row starting 997
// bytes after the last: deterministic and the same for every trainer.
class ShakespeareBytes : public BatchSource {
public:
    explicit ShakespeareBytes(int64_t blockSize)
        : m_blockSize(blockSize)
    {
        std::ifstream in(kShakespeare, std::ios::binary);
        m_bytes.assign(std::istreambuf_iterator<char>(in), {});
        if (m_bytes.size() < 100000)
            qFatal("cannot read %s", kShakespeare);
    }
    void next(int64_t batch, int64_t* x, int64_t* y) override
    {
        for (int64_t row = 0; row < batch; ++row) {
            const std::size_t start = (m_cursor * 997) % (m_bytes.size() - std::size_t(m_blockSize) - 1);
            ++m_cursor;
            for (int64_t i = 0; i < m_blockSize; ++i) {
                x[row * m_blockSize + i] = m_bytes[start + std::size_t(i)] & 0x7f;
                y[row * m_blockSize + i] = m_bytes[start + std::size_t(i) + 1] & 0x7f;
            }
        }
        ++m_position;
    }
    uint64_t position() const override { return m_position; }
    void setPosition(uint64_t p) override { m_position = p; }
    int64_t blockSize() const override { return m_blockSize; }

private:
    int64_t m_blockSize;
    std::string m_bytes;
    uint64_t m_cursor = 0;
    uint64_t m_position = 0;
};

TrainOptions smallGpt()
{
    TrainOptions o;
    o.model.nLayer = 3;
    o.model.nHead = 2;
    o.model.nEmbd = 64;
    o.model.blockSize = 32;
    o.model.vocabSize = 128;
    o.model.dropout = 0.0;
    o.batchSize = 8;
    o.maxIters = 100;
    o.schedule = {.learningRate = 3e-3, .minLr = 3e-4, .warmupIters = 2, .lrDecayIters = 100, .decayLr = true};
    o.evalInterval = 0;
    o.evalIters = 0;
    o.device = "cpu";
    o.cpuReplicas = 1;
    return o;
}

std::unique_ptr<Trainer> makeTrainer(const TrainOptions& options)
{
    TrainData data;
    data.train = std::make_unique<ShakespeareBytes>(options.model.blockSize);
    auto trainer = Trainer::create(options, std::move(data));
    if (!trainer)
        qFatal("%s", trainer.error().message.c_str());
    return std::move(trainer).value();
}

double largestDifference(Trainer& a, Trainer& b)
{
    const auto pa = a.model()->parameters(), pb = b.model()->parameters();
    double worst = 0;
    for (std::size_t i = 0; i < pa.size(); ++i)
        worst = std::max(worst, (pa[i] - pb[i]).abs().max().item<double>());
    return worst;
}

} // namespace

class TestTrainerMemory : public QObject {
    Q_OBJECT

private slots:
    void initTestCase() { QVERIFY2(std::filesystem::is_regular_file(kShakespeare), kShakespeare); }

    void checkpointedEqualsPlain_data()
    {
        QTest::addColumn<int>("replicas");
        QTest::addColumn<int>("accumulation");
        QTest::newRow("one replica") << 1 << 1;
        QTest::newRow("one replica, 2 micro-batches") << 1 << 2;
        QTest::newRow("2 replicas") << 2 << 1;
    }

    void checkpointedEqualsPlain()
    {
        QFETCH(int, replicas);
        QFETCH(int, accumulation);
        TrainOptions options = smallGpt();
        options.cpuReplicas = replicas;
        options.gradAccumulationSteps = accumulation;
        auto plain = makeTrainer(options);
        options.activationCheckpointing = true;
        auto checkpointed = makeTrainer(options);
        QCOMPARE(largestDifference(*plain, *checkpointed), 0.0);
        for (int i = 0; i < 8; ++i) {
            const StepReport a = plain->step();
            const StepReport b = checkpointed->step();
            QVERIFY2(std::abs(a.loss - b.loss) < 1e-5, qPrintable(QString::number(a.loss - b.loss)));
            QVERIFY2(std::abs(a.gradNorm - b.gradNorm) < 1e-5 * std::max(1.0, a.gradNorm),
                qPrintable(QString::number(a.gradNorm - b.gradNorm)));
        }
        // The weights moved, and alike.
        auto fresh = makeTrainer(options);
        QVERIFY(largestDifference(*plain, *fresh) > 1e-2);
        const double worst = largestDifference(*plain, *checkpointed);
        QVERIFY2(worst < 1e-5, qPrintable(QString::number(worst)));
    }

    void checkpointingNeedsDropoutZero()
    {
        TrainOptions options = smallGpt();
        options.activationCheckpointing = true;
        options.model.dropout = 0.1;
        TrainData data;
        data.train = std::make_unique<ShakespeareBytes>(options.model.blockSize);
        auto trainer = Trainer::create(options, std::move(data));
        QVERIFY(!trainer);
        QCOMPARE(trainer.error().code, std::string("bad_options"));
    }

    // Released gradients are written afresh by the next step, which then
    // matches a trainer that kept them.
    void releasedGradientsComeBack()
    {
        TrainOptions options = smallGpt();
        options.cpuReplicas = 2;
        auto kept = makeTrainer(options);
        auto released = makeTrainer(options);
        for (int i = 0; i < 3; ++i) {
            kept->step();
            released->step();
            released->releaseGradients();
            for (const auto& p : released->model()->parameters())
                QVERIFY(!p.grad().defined());
        }
        QCOMPARE(largestDifference(*kept, *released), 0.0);
    }

    // Every map value is the midpoint of an equal step across its decade
    // below the block's maximum: 64 steps in [0.1, 1] for the signed map,
    // 128 for the unsigned, half as many each decade down. A magnitude in
    // decade d is so stored within half a step: at most
    // 0.9 / 64 / 2 / 0.1 * 2^d = 7.03% * 2^d of itself (signed), half that
    // (unsigned); elements far below their block's largest are coarser.
    void momentMapsBoundTheRelativeError()
    {
        const auto& s = signedMomentMap();
        const auto& u = unsignedMomentMap();
        QVERIFY(std::is_sorted(s.begin(), s.end()));
        QVERIFY(std::is_sorted(u.begin(), u.end()));
        QCOMPARE(u.front(), 0.0f);
        QCOMPARE(u.back(), 1.0f);
        QCOMPARE(s.back(), 1.0f);
        QCOMPARE(s[quantise(s, 0.0f)], 0.0f);
        std::mt19937 rng(7);
        std::uniform_real_distribution<double> within(0.0, 1.0);
        for (int d = 0; d < 5; ++d) {
            double worstSigned = 0, worstUnsigned = 0;
            for (int i = 0; i < 50000; ++i) {
                const float x = float(std::pow(10.0, -d - within(rng)));
                worstSigned = std::max(worstSigned, std::abs(double(-s[quantise(s, -x)]) - x) / x);
                worstSigned = std::max(worstSigned, std::abs(double(s[quantise(s, x)]) - x) / x);
                worstUnsigned = std::max(worstUnsigned, std::abs(double(u[quantise(u, x)]) - x) / x);
            }
            const double bound = 0.0704 * std::pow(2.0, d);
            QVERIFY2(worstSigned <= bound, qPrintable(QString::number(worstSigned)));
            QVERIFY2(worstUnsigned <= bound / 2, qPrintable(QString::number(worstUnsigned)));
        }
    }

    // From zero moments the first step's moments are exact in float32:
    // the step equals plain AdamW's.
    void int8MomentsFirstStepEqualsPlain()
    {
        TrainOptions options = smallGpt();
        auto plain = makeTrainer(options);
        options.int8Moments = true;
        auto eight = makeTrainer(options);
        const StepReport a = plain->step();
        const StepReport b = eight->step();
        QCOMPARE(a.loss, b.loss);
        const double worst = largestDifference(*plain, *eight);
        QVERIFY2(worst < 1e-6, qPrintable(QString::number(worst)));
    }

    // Over 40 steps on real text the 8-bit moments follow plain AdamW.
    // Tolerance: a stored moment is within 7% (m) and 3.5% (v) of itself
    // when it is near its block's largest, twice that a decade lower, and
    // so on; rounding to the nearest value is unbiased, so the weights'
    // path wanders off plain AdamW's by a fraction of its length without a
    // systematic pull, and the loss stays close. Measured on this run
    // (2026-11-28): 18.8% of the movement apart, final losses 3.155 and
    // 3.119. Bounds asserted: under 30% of plain's movement apart, the
    // last 5 steps' mean loss within 2% of plain's, and both fall.
    void int8MomentsTrainLikePlain()
    {
        TrainOptions options = smallGpt();
        auto start = makeTrainer(options);
        auto plain = makeTrainer(options);
        options.int8Moments = true;
        auto eight = makeTrainer(options);
        double firstLoss = 0, lastPlain = 0, lastEight = 0;
        for (int i = 0; i < 40; ++i) {
            const double a = plain->step().loss;
            const double b = eight->step().loss;
            if (i == 0)
                firstLoss = a;
            // The mean of the last 5 steps' losses.
            if (i >= 35) {
                lastPlain += a / 5;
                lastEight += b / 5;
            }
        }
        double moved = 0, apart = 0;
        const auto p0 = start->model()->parameters(), pa = plain->model()->parameters(),
                   pb = eight->model()->parameters();
        for (std::size_t i = 0; i < pa.size(); ++i) {
            moved += (pa[i] - p0[i]).pow(2).sum().item<double>();
            apart += (pb[i] - pa[i]).pow(2).sum().item<double>();
        }
        const double drift = std::sqrt(apart / moved);
        qInfo("plain %.4f -> %.4f, 8-bit -> %.4f; trajectories apart by %.2f%% of the movement", firstLoss, lastPlain,
            lastEight, 100 * drift);
        QVERIFY(lastPlain < firstLoss - 0.5);
        QVERIFY2(std::abs(lastEight - lastPlain) < 0.02 * lastPlain, qPrintable(QString::number(lastEight)));
        QVERIFY2(drift < 0.3, qPrintable(QString::number(drift)));
        QVERIFY(drift > 0); // the moments really are quantised
    }

    // The CPU replicas split the 8-bit update by blocks between threads:
    // the same update as one thread's.
    void int8MomentsWithReplicasMatchOne()
    {
        TrainOptions options = smallGpt();
        options.int8Moments = true;
        auto one = makeTrainer(options);
        options.cpuReplicas = 2;
        auto two = makeTrainer(options);
        for (int i = 0; i < 5; ++i) {
            const StepReport a = one->step();
            const StepReport b = two->step();
            QVERIFY2(std::abs(a.loss - b.loss) < 1e-5, qPrintable(QString::number(a.loss - b.loss)));
        }
        const double worst = largestDifference(*one, *two);
        QVERIFY2(worst < 1e-4, qPrintable(QString::number(worst)));
    }

    void int8MomentsRefuseToSave()
    {
        TrainOptions options = smallGpt();
        options.int8Moments = true;
        auto trainer = makeTrainer(options);
        trainer->step();
        const auto file = std::filesystem::temp_directory_path() / "tst_trainer_memory_state.bin";
        const auto saved = trainer->saveState(file);
        QVERIFY(!saved);
        QCOMPARE(saved.error().code, std::string("bad_options"));
        QVERIFY(!std::filesystem::exists(file));
    }
};

QTEST_GUILESS_MAIN(TestTrainerMemory)
#include "tst_trainer_memory.moc"
