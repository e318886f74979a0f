// ZeRO stages 0-3 on 2 and 4 c10d Gloo ranks (processes on loopback) against
// one process training the same global batch: losses, per-parameter
// gradients and weights after a few steps; the training-state bytes each
// rank holds against the ZeRO paper's formula; a checkpoint written under
// ZeRO-3 resumed under ZeRO-1 on another rank count; the Hugging Face export;
// a team of in-process ranks (device_team.h) whose rank throws.
#include "engine/hf_gpt2.h"
#include "engine/parallel/device_team.h"
#include "parallel_fixtures.h"

#include <QTemporaryDir>

using namespace crowdtrain::testing;

namespace {

// Elements of a unit padded to a multiple of the ranks.
int64_t padded(int64_t n, int64_t ranks)
{
    return (n + ranks - 1) / ranks * ranks;
}

// Peak bytes of parameters + gradients + AdamW moments per rank (fp32:
// 4 + 4 + 8 bytes per parameter unsharded), for the tiny model of
// parallel_fixtures.h: the root unit (embeddings, final LayerNorm) and one
// unit per block. Stage 2 adds the gradient buffers of the root and of one
// block during the backward, stage 3 also their gathered parameters.
int64_t predictedPeak(int stage, int64_t n, int64_t layers)
{
    const int64_t d = 64, v = 128, t = 32;
    const int64_t root = padded(v * d + t * d + 2 * d, n), block = padded(12 * d * d + 13 * d, n);
    const int64_t all = root + layers * block, shard = all / n;
    switch (stage) {
    case 0:
        return 16 * all;
    case 1:
        return 4 * all + 4 * all + 8 * shard;
    case 2:
        return 4 * all + 4 * shard + 8 * shard + 4 * (root + block);
    default:
        return 16 * shard + 8 * (root + block);
    }
}

// Tiny Shakespeare until its draw number `failAt`, which throws (once).
class FailingSource : public ShakespeareSource {
public:
    FailingSource(int64_t blockSize, uint64_t failAt)
        : ShakespeareSource(blockSize, 1)
        , m_failAt(failAt)
    { }
    void next(int64_t batch, int64_t* x, int64_t* y) override
    {
        if (m_draws++ == m_failAt)
            throw std::runtime_error("the data source failed");
        ShakespeareSource::next(batch, x, y);
    }

private:
    uint64_t m_failAt;
    uint64_t m_draws = 0;
};

} // namespace

class TestParallelZero : public QObject {
    Q_OBJECT

private slots:
    void initTestCase()
    {
        QVERIFY2(std::filesystem::is_regular_file(kShakespeare),
            qPrintable(QStringLiteral("missing input: %1").arg(QString::fromUtf8(kShakespeare))));
        QVERIFY(m_dir.isValid());
        QVERIFY(runRanks(1, {QStringLiteral("batch=8"), QStringLiteral("grads=1"), QStringLiteral("steps=4")},
            m_dir.filePath(QStringLiteral("single")), m_single));
        QCOMPARE(m_single.losses.size(), std::size_t(4));
        QVERIFY(m_single.losses.back() < m_single.losses.front()); // it trains
    }

    void matchesOneProcess_data()
    {
        QTest::addColumn<int>("world");
        QTest::addColumn<int>("stage");
        QTest::addColumn<int>("checkpointing");
        QTest::newRow("DDP, 2 ranks") << 2 << 0 << 0;
        QTest::newRow("ZeRO-1, 2 ranks") << 2 << 1 << 0;
        QTest::newRow("ZeRO-2, 2 ranks") << 2 << 2 << 0;
        QTest::newRow("ZeRO-3, 2 ranks") << 2 << 3 << 0;
        QTest::newRow("ZeRO-3, 4 ranks") << 4 << 3 << 0;
        QTest::newRow("ZeRO-2, 4 ranks, activation checkpointing") << 4 << 2 << 1;
    }

    // Same global batch (8 rows): only the order of the gradient sums
    // differs, so the figures agree to float rounding.
    void matchesOneProcess()
    {
        QFETCH(int, world);
        QFETCH(int, stage);
        QFETCH(int, checkpointing);
        RunResult run;
        QVERIFY(runRanks(world,
            {QStringLiteral("batch=%1").arg(8 / world), QStringLiteral("zero=%1").arg(stage),
                QStringLiteral("ckpt=%1").arg(checkpointing), QStringLiteral("grads=1"), QStringLiteral("steps=4")},
            m_dir.filePath(QStringLiteral("run")), run));
        const double loss = maxLossDifference(run.losses, m_single.losses);
        const double grads = maxDifference(run.grads, m_single.grads);
        const double params = maxDifference(run.params, m_single.params);
        qInfo("loss %.3g, gradient %.3g, weight %.3g apart; peak %lld bytes", loss, grads, params,
            static_cast<long long>(run.peakBytes));
        QVERIFY2(loss < 1e-5, qPrintable(QString::number(loss)));
        QVERIFY2(grads < 1e-6, qPrintable(QString::number(grads)));
        QVERIFY2(params < 1e-5, qPrintable(QString::number(params)));
        QVERIFY(std::abs(run.valLoss - m_single.valLoss) < 1e-5);
        // The state each rank holds is what the ZeRO paper predicts.
        QCOMPARE(run.peakBytes, predictedPeak(stage, world, 2));
        m_peaks[std::make_pair(world, stage)] = run.peakBytes;
    }

    // With 8 blocks the shards outweigh the one unit each stage gathers:
    // each stage holds less than the one before, as the formula says.
    void memoryFallsWithEachStage()
    {
        QCOMPARE(m_single.peakBytes, predictedPeak(0, 1, 2));
        QCOMPARE(peak(2, 0), m_single.peakBytes); // DDP replicates everything
        int64_t previous = std::numeric_limits<int64_t>::max();
        for (int stage = 0; stage <= 3; ++stage) {
            RunResult run;
            QVERIFY(runRanks(2,
                {QStringLiteral("layers=8"), QStringLiteral("batch=4"), QStringLiteral("zero=%1").arg(stage),
                    QStringLiteral("steps=1")},
                m_dir.filePath(QStringLiteral("memory")), run));
            qInfo("ZeRO-%d, 2 ranks, 8 blocks: %lld bytes of state per rank", stage,
                static_cast<long long>(run.peakBytes));
            QCOMPARE(run.peakBytes, predictedPeak(stage, 2, 8));
            QVERIFY(run.peakBytes < previous);
            previous = run.peakBytes;
        }
        QVERIFY(peak(4, 3) < peak(2, 3)); // more ranks, smaller shards
    }

    // ZeRO-3 on 2 ranks saves after 2 steps; ZeRO-1 on 4 ranks resumes it
    // and lands where one process does after 4 steps. The export holds the
    // whole model.
    void checkpointResumesUnderAnotherLayout()
    {
        const QString state = m_dir.filePath(QStringLiteral("zero3.state"));
        const QString exported = m_dir.filePath(QStringLiteral("hf"));
        RunResult first, second;
        QVERIFY(runRanks(2,
            {QStringLiteral("batch=4"), QStringLiteral("zero=3"), QStringLiteral("grads=1"), QStringLiteral("steps=2"),
                QStringLiteral("save=") + state, QStringLiteral("export=") + exported},
            m_dir.filePath(QStringLiteral("first")), first));
        QVERIFY(runRanks(4,
            {QStringLiteral("batch=2"), QStringLiteral("zero=1"), QStringLiteral("steps=2"),
                QStringLiteral("resume=") + state},
            m_dir.filePath(QStringLiteral("second")), second));
        const std::vector<double> tail(m_single.losses.begin() + 2, m_single.losses.end());
        QVERIFY2(maxLossDifference(second.losses, tail) < 1e-5, qPrintable(QString::number(second.losses[0])));
        const double params = maxDifference(second.params, m_single.params);
        QVERIFY2(params < 1e-5, qPrintable(QString::number(params)));

        auto weights = importHuggingFaceGpt2(exported.toStdString());
        QVERIFY2(weights, weights ? "" : weights.error().message.c_str());
        std::vector<torch::Tensor> hf;
        for (auto& [name, value] : weights->parameters)
            hf.push_back(value);
        QCOMPARE(maxDifference(hf, first.params), 0.0);
    }

    void badCheckpointChangesNothing()
    {
        const QString bogus = m_dir.filePath(QStringLiteral("bogus.state"));
        QFile file(bogus);
        QVERIFY(file.open(QIODevice::WriteOnly));
        file.write("not a checkpoint");
        file.close();
        RunResult run;
        QVERIFY(!runRanks(1, {QStringLiteral("resume=") + bogus}, m_dir.filePath(QStringLiteral("bad")), run));
    }

    // A rank of an in-process team (Gloo) that throws leaves no peer
    // waiting in a collective for it (the team's timeout is far longer
    // than this test may run): the step rethrows its error, the team is
    // broken and says so at once on the next call, and it is destroyed.
    void aFailingRankBreaksTheTeam()
    {
        TrainOptions options = tinyModel({});
        options.batchSize = 4;
        DeviceTeamOptions teamOptions{.devices = {"cpu", "cpu"}, .timeout = std::chrono::minutes(30)};
        auto team
            = DeviceTeam::create(options, teamOptions, std::make_unique<FailingSource>(options.model.blockSize, 1));
        QVERIFY2(team, team ? "" : team.error().message.c_str());
        (*team)->step(1e-3); // draw 0: both ranks train it
        QVERIFY(!(*team)->broken());
        std::string failure;
        try {
            (*team)->step(1e-3); // draw 1 throws on one rank; the other reaches the gradients' all-reduce
        } catch (const std::exception& e) {
            failure = e.what();
        }
        QCOMPARE(failure, std::string("the data source failed"));
        QVERIFY((*team)->broken());
        bool refused = false;
        try {
            (*team)->step(1e-3);
        } catch (const TeamBroken&) {
            refused = true;
        }
        QVERIFY(refused);
        team->reset();
    }

private:
    int64_t peak(int world, int stage) const
    {
        auto found = m_peaks.find(std::make_pair(world, stage));
        return found == m_peaks.end() ? -1 : found->second;
    }

    QTemporaryDir m_dir;
    RunResult m_single;
    std::map<std::pair<int, int>, int64_t> m_peaks;
};

int main(int argc, char** argv)
{
    if (isChild(argc, argv))
        return childMain(argc, argv);
    QCoreApplication app(argc, argv);
    TestParallelZero test;
    return QTest::qExec(&test, argc, argv);
}

#include "tst_parallel_zero.moc"
