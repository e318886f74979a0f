// 1F1B pipeline parallel on 2 and 4 c10d Gloo ranks (4 blocks, 4
// micro-batches), with data parallel (2 stages x 2 replicas) and with
// activation checkpointing, against one process accumulating the same
// micro-batches; the bubble on paper; a pipeline checkpoint resumed by one
// process.
#include "parallel_fixtures.h"

#include <QTemporaryDir>

using namespace crowdtrain::testing;

class TestParallelPipeline : public QObject {
    Q_OBJECT

private slots:
    void initTestCase()
    {
        QVERIFY2(std::filesystem::is_regular_file(kShakespeare),
            qPrintable(QStringLiteral("missing input: %1").arg(QString::fromUtf8(kShakespeare))));
        QVERIFY(runRanks(1, m_common + QStringList{QStringLiteral("batch=2"), QStringLiteral("grads=1")},
            m_dir.filePath(QStringLiteral("single")), m_single));
    }

    void matchesOneProcess_data()
    {
        QTest::addColumn<int>("world");
        QTest::addColumn<int>("stages");
        QTest::addColumn<QStringList>("arguments");
        QTest::newRow("PP 2") << 2 << 2 << QStringList{QStringLiteral("pp=2"), QStringLiteral("batch=2")};
        QTest::newRow("PP 4") << 4 << 4 << QStringList{QStringLiteral("pp=4"), QStringLiteral("batch=2")};
        QTest::newRow("PP 2 x DP 2, ZeRO-1")
            << 4 << 2 << QStringList{QStringLiteral("pp=2"), QStringLiteral("batch=1"), QStringLiteral("zero=1")};
        QTest::newRow("PP 2, activation checkpointing")
            << 2 << 2 << QStringList{QStringLiteral("pp=2"), QStringLiteral("batch=2"), QStringLiteral("ckpt=1")};
    }

    void matchesOneProcess()
    {
        QFETCH(int, world);
        QFETCH(int, stages);
        QFETCH(QStringList, arguments);
        RunResult run;
        QVERIFY(runRanks(world, m_common + arguments + QStringList{QStringLiteral("grads=1")},
            m_dir.filePath(QStringLiteral("run")), run));
        const double loss = maxLossDifference(run.losses, m_single.losses);
        const double grads = maxDifference(run.grads, m_single.grads);
        const double params = maxDifference(run.params, m_single.params);
        qInfo("loss %.3g, gradient %.3g, weight %.3g apart; bubble %.3f on paper, stage 0 waited %.1f ms a step", loss,
            grads, params, run.bubble, run.waitMs);
        QVERIFY2(loss < 1e-5, qPrintable(QString::number(loss)));
        QVERIFY2(grads < 1e-6, qPrintable(QString::number(grads)));
        QVERIFY2(params < 1e-3, qPrintable(QString::number(params)));
        // 4 micro-batches: (P - 1) / (M + P - 1).
        QCOMPARE(run.bubble, double(stages - 1) / double(4 + stages - 1));
        // The first stage holds its blocks and the embeddings, not the rest.
        QVERIFY(run.localParameters < m_single.localParameters * 3 / 4);
    }

    void checkpointResumesInOneProcess()
    {
        const QString state = m_dir.filePath(QStringLiteral("pp.state"));
        RunResult first, second;
        QVERIFY(runRanks(2,
            {QStringLiteral("layers=4"), QStringLiteral("accum=4"), QStringLiteral("pp=2"), QStringLiteral("batch=2"),
                QStringLiteral("grads=1"), QStringLiteral("steps=1"), QStringLiteral("save=") + state},
            m_dir.filePath(QStringLiteral("first")), first));
        QVERIFY(runRanks(1,
            {QStringLiteral("layers=4"), QStringLiteral("accum=4"), QStringLiteral("batch=2"),
                QStringLiteral("steps=2"), QStringLiteral("resume=") + state},
            m_dir.filePath(QStringLiteral("second")), second));
        const std::vector<double> tail(m_single.losses.begin() + 1, m_single.losses.end());
        const double loss = maxLossDifference(second.losses, tail);
        QVERIFY2(loss < 1e-5, qPrintable(QString::number(loss)));
        QVERIFY(maxDifference(second.params, m_single.params) < 1e-3);
    }

    void rejectsMoreStagesThanBlocks()
    {
        RunResult run;
        QVERIFY(!runRanks(
            4, {QStringLiteral("pp=4"), QStringLiteral("layers=2")}, m_dir.filePath(QStringLiteral("bad")), run));
    }

private:
    QTemporaryDir m_dir;
    const QStringList m_common{QStringLiteral("layers=4"), QStringLiteral("accum=4"), QStringLiteral("steps=3")};
    RunResult m_single;
};

int main(int argc, char** argv)
{
    if (isChild(argc, argv))
        return childMain(argc, argv);
    QCoreApplication app(argc, argv);
    TestParallelPipeline test;
    return QTest::qExec(&test, argc, argv);
}

#include "tst_parallel_pipeline.moc"
