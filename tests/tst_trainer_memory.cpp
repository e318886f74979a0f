// The trainer's memory options on real text (Tiny Shakespeare bytes):
// activation checkpointing per block must train exactly as the plain
// passes do (losses and weights within 1e-5 after several steps, with one
// CPU replica and with two, with gradient accumulation); gradients released
// between runs come back on the next step; AdamW with 8-bit moments keeps
// each moment within its map's relative step, takes plain AdamW's first step
// exactly and trains as plain AdamW does within the tolerance argued at
// int8MomentsTrainLikePlain; the same update from tensor operations (the
// path a GPU takes) equals the CPU kernel's, moments and weights, bit for
// bit; bf16 weights with the fp32 master and 8-bit moments in host RAM
// train as plain fp32 does within the tolerance argued at
// hostMasterTrainsLikePlain.
#include "engine/adamw8bit.h"
#include "engine/adamw8bit_tensors.h"
#include "engine/checkpointing.h"
#include "engine/host_master.h"
#include "engine/trainer.h"

#include <QTest>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
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

    // The branchless quantise() is std::lower_bound's nearest entry, code
    // for code: every entry, its neighbouring floats and the midpoints
    // between entries (the ties), both sides of both maps' ends, infinities,
    // NaN and a million random floats of every exponent.
    void quantiseEqualsTheReference()
    {
        std::vector<float> xs{0.0f, -0.0f, std::numeric_limits<float>::infinity(),
            -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
            std::numeric_limits<float>::denorm_min(), 2.0f, -2.0f, 1e30f, -1e30f};
        for (const auto* map : {&signedMomentMap(), &unsignedMomentMap()})
            for (std::size_t i = 0; i < map->size(); ++i) {
                const float entry = (*map)[i];
                xs.insert(xs.end(), {entry, std::nextafter(entry, -2.0f), std::nextafter(entry, 2.0f)});
                if (i + 1 < map->size()) {
                    const float middle = entry + ((*map)[i + 1] - entry) / 2;
                    xs.insert(xs.end(), {middle, std::nextafter(middle, -2.0f), std::nextafter(middle, 2.0f)});
                }
            }
        std::mt19937 rng(11);
        for (int i = 0; i < 1000000; ++i) {
            const uint32_t bits = rng();
            float x;
            std::memcpy(&x, &bits, sizeof x);
            xs.push_back(x);
        }
        std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
        for (int i = 0; i < 1000000; ++i)
            xs.push_back(unit(rng));
        for (const auto* map : {&signedMomentMap(), &unsignedMomentMap()})
            for (const float x : xs)
                if (quantise(*map, x) != quantiseReference(*map, x))
                    QFAIL(qPrintable(QStringLiteral("x = %1: %2, the reference %3")
                                         .arg(double(x), 0, 'g', 9)
                                         .arg(quantise(*map, x))
                                         .arg(quantiseReference(*map, x))));
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
        // Two replicas sum the gradient in another order; an element whose
        // moment then rounds to the neighbouring 8-bit code moves by a
        // fraction of a step (at most lr = 3e-3) more or less, and its
        // neighbours' gradients follow in later steps. On this project's
        // AMD EPYC machine 362 of 160,320 elements (0.23%) ended more than
        // 1e-5 apart after 5 steps, the most by 3.9e-4 (on the Intel machine
        // before, all within 1e-4); a replica sum that is wrong (not
        // averaged, a replica's gradient lost) moves nearly every element.
        const auto pa = one->model()->parameters(), pb = two->model()->parameters();
        int64_t apart = 0, elements = 0;
        for (std::size_t i = 0; i < pa.size(); ++i) {
            apart += ((pa[i] - pb[i]).abs() > 1e-5).sum().item<int64_t>();
            elements += pa[i].numel();
        }
        QVERIFY2(apart * 100 <= elements, qPrintable(QString::number(apart)));
        const double worst = largestDifference(*one, *two);
        QVERIFY2(worst < 3e-3, qPrintable(QString::number(worst)));
        qInfo("%lld of %lld elements apart by more than 1e-5, the most by %g", (long long)apart, (long long)elements,
            worst);
    }

    // The tensor path (engine/adamw8bit_tensors.h) against the CPU kernel,
    // optimizer to optimizer: two copies of a model take the same gradients
    // of real text for 6 steps (the clipping coefficient below 1 on some),
    // and keep the same moments and weights, exactly: the same float32
    // operations in the same order, the same rounding to the map.
    void int8MomentTensorsEqualTheKernel()
    {
        TrainOptions options = smallGpt();
        torch::manual_seed(5);
        Gpt a(options.model), b(options.model);
        {
            torch::NoGradGuard noGrad;
            const auto pa = a->parameters(), pb = b->parameters();
            for (std::size_t i = 0; i < pa.size(); ++i)
                pb[i].copy_(pa[i]);
        }
        auto adamW = [&](Gpt& model) {
            auto o = torch::optim::AdamWOptions(3e-3).betas({0.9, 0.95}).weight_decay(0.1).eps(1e-8);
            std::vector<torch::optim::OptimizerParamGroup> groups;
            groups.emplace_back(model->decayedParameters(), std::make_unique<torch::optim::AdamWOptions>(o));
            groups.emplace_back(model->undecayedParameters(),
                std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(o).weight_decay(0.0)));
            return torch::optim::AdamW(std::move(groups), o);
        };
        torch::optim::AdamW optimizerA = adamW(a), optimizerB = adamW(b);
        std::vector<torch::Tensor> p0;
        for (const auto& p : a->parameters())
            p0.push_back(p.detach().clone());
        AdamW8bit kernel;
        AdamW8bitTensors tensors;
        ShakespeareBytes source(options.model.blockSize);
        const int64_t batch = 4, t = options.model.blockSize;
        std::vector<int64_t> x(std::size_t(batch * t)), y(x.size());
        for (int step = 0; step < 6; ++step) {
            source.next(batch, x.data(), y.data());
            const auto xs = torch::from_blob(x.data(), {batch, t}, torch::kLong);
            const auto ys = torch::from_blob(y.data(), {batch, t}, torch::kLong);
            optimizerA.zero_grad();
            optimizerB.zero_grad();
            a->loss(xs, ys).backward();
            b->loss(xs, ys).backward();
            const float gradScale = step % 2 ? 0.5f : 1.0f;
            QVERIFY(kernel.step(optimizerA, gradScale));
            QVERIFY(tensors.step(optimizerB, gradScale));
        }
        QCOMPARE(tensors.stepCount(), int64_t(6));
        QVERIFY(tensors.stateBytes() >= kernel.stateBytes()); // codes padded to whole blocks
        std::size_t index = 0;
        double moved = 0;
        for (const auto& group : optimizerA.param_groups())
            for (std::size_t j = 0; j < group.params().size(); ++j, ++index) {
                for (bool second : {false, true}) {
                    const torch::Tensor ma = kernel.moment(index, second), mb = tensors.moment(index, second);
                    QVERIFY(ma.defined() && mb.defined());
                    QVERIFY2(torch::equal(ma, mb),
                        qPrintable(QStringLiteral("moment %1 of parameter %2 differs by %3")
                                       .arg(second ? 2 : 1)
                                       .arg(index)
                                       .arg((ma - mb).abs().max().item<double>())));
                }
            }
        const auto pa = a->parameters(), pb = b->parameters();
        for (std::size_t i = 0; i < pa.size(); ++i) {
            QVERIFY2(
                torch::equal(pa[i], pb[i]), qPrintable(QString::number((pa[i] - pb[i]).abs().max().item<double>())));
            moved += (pa[i] - p0[i]).abs().sum().item<double>();
        }
        QVERIFY(moved > 0);
    }

    // The trainer takes the tensor path when asked (a GPU always does):
    // the same losses and weights as the CPU kernel's trainer.
    void int8MomentTensorsTrainAsTheKernel()
    {
        TrainOptions options = smallGpt();
        options.int8Moments = true;
        auto kernel = makeTrainer(options);
        options.int8MomentTensors = true;
        options.cpuReplicas = 2; // taken as 1: the replicas' update is the CPU kernel's
        auto tensors = makeTrainer(options);
        for (int i = 0; i < 5; ++i)
            QCOMPARE(kernel->step().loss, tensors->step().loss);
        QCOMPARE(largestDifference(*kernel, *tensors), 0.0);
    }

    // bf16 weights and gradients on the "device" (the CPU here), the fp32
    // master and 8-bit moments in host RAM, against plain fp32 AdamW, 40
    // steps on real text. Tolerance: a bf16 weight holds 8 significant
    // bits, so the forward and backward see each weight within 2^-9 (0.2%)
    // of the master, and every activation and gradient is rounded as
    // finely; the master is fp32 (an update smaller than a bf16 step is
    // kept, not lost), so the rounding is noise on each step, not a drift.
    // The two runs' paths part all the same, and at step 40 the loss still
    // falls about 0.04 a step (4.85 to 3.15 over 40 steps): a run a few
    // steps ahead or behind is 4-5% off. Measured (2026-11-28): plain
    // 3.155, bf16 + host master 3.006 (the last 5 steps' mean; 8-bit
    // moments alone: 3.119). Asserted: the first step's loss within 1% (the
    // bf16 copy of the same weights), the last 5 steps' mean within 6% of
    // plain's, both falling by over 0.5; and the master, not its bf16
    // copy, is what named() gives.
    void hostMasterTrainsLikePlain()
    {
        TrainOptions options = smallGpt();
        auto plain = makeTrainer(options);
        options.bf16HostMaster = true;
        auto offloaded = makeTrainer(options);
        HostMaster* master = offloaded->hostMaster();
        QVERIFY(master);
        for (const auto& p : offloaded->model()->parameters())
            QCOMPARE(p.scalar_type(), torch::kBFloat16);
        // The master starts as the fp32 weights.
        const auto named = namedParameters(plain->model());
        for (std::size_t i = 0; i < named.size(); ++i)
            QVERIFY(torch::equal(named[i].second, master->named()[i].second));
        double firstLoss = 0, lastPlain = 0, lastOffloaded = 0;
        for (int i = 0; i < 40; ++i) {
            const StepReport a = plain->step();
            const StepReport b = offloaded->step();
            QVERIFY(std::isfinite(b.loss) && std::isfinite(b.gradNorm));
            if (i == 0) {
                firstLoss = a.loss;
                QVERIFY2(std::abs(a.loss - b.loss) < 0.01 * a.loss, qPrintable(QString::number(b.loss)));
            }
            if (i >= 35) {
                lastPlain += a.loss / 5;
                lastOffloaded += b.loss / 5;
            }
        }
        qInfo("plain %.4f -> %.4f, bf16 + host master -> %.4f", firstLoss, lastPlain, lastOffloaded);
        QVERIFY(lastPlain < firstLoss - 0.5);
        QVERIFY(lastOffloaded < firstLoss - 0.5);
        QVERIFY2(std::abs(lastOffloaded - lastPlain) < 0.06 * lastPlain, qPrintable(QString::number(lastOffloaded)));
        // The device weights are the master rounded to bf16; the master
        // keeps what bf16 cannot hold.
        const auto device = namedParameters(offloaded->model());
        bool finer = false;
        for (std::size_t i = 0; i < device.size(); ++i) {
            const torch::Tensor& fp32 = master->named()[i].second;
            QCOMPARE(master->named()[i].first, device[i].first);
            QVERIFY(torch::equal(fp32.to(torch::kBFloat16), device[i].second));
            finer = finer || !torch::equal(fp32.to(torch::kBFloat16).to(torch::kFloat), fp32);
        }
        QVERIFY(finer);
        QVERIFY(master->hostBytes() > 4 * plain->model()->parameterCount());
    }

    // toDevice() after the master changed (a task's theta read in).
    void hostMasterToDevice()
    {
        TrainOptions options = smallGpt();
        options.bf16HostMaster = true;
        auto trainer = makeTrainer(options);
        HostMaster* master = trainer->hostMaster();
        for (const auto& [name, tensor] : master->named())
            tensor.fill_(0.25f + 1.0f / 1024);
        master->toDevice();
        for (const auto& p : trainer->model()->parameters())
            QVERIFY(torch::equal(p, torch::full_like(p, 0.25)));
    }

    void hostMasterRefusesToSave()
    {
        TrainOptions options = smallGpt();
        options.bf16HostMaster = true;
        auto trainer = makeTrainer(options);
        trainer->step();
        const auto file = std::filesystem::temp_directory_path() / "tst_trainer_memory_master.bin";
        const auto saved = trainer->saveState(file);
        QVERIFY(!saved);
        QVERIFY(!std::filesystem::exists(file));
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
