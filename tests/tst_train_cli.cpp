// crowdtrain-train end to end on synthetic text (tests/synthetic_corpus.h): a run's progress lines and JSON
// summary, checkpoint + resume giving the same steps as one straight run,
// export + sample, --nproc 2 (two Gloo processes on loopback) matching one
// process with the double batch, and bad arguments failing clearly.
#include <nlohmann/json.hpp>

#include <QProcess>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QTest>

#include "free_port.h"
#include "synthetic_corpus.h"
#include <filesystem>
#include <fstream>
#include <map>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

using namespace Qt::StringLiterals;

using crowdtrain::testing::freePort;

namespace {

struct Run {
    int exitCode = -1;
    QByteArray out;
    QString err;

    // "step N | loss L | ..." lines, by step.
    std::map<int, double> losses() const
    {
        std::map<int, double> byStep;
        static const QRegularExpression line(QStringLiteral("^step (\\d+) \\| loss ([0-9.]+) "));
        for (const QByteArray& text : out.split('\n')) {
            const auto match = line.match(QString::fromUtf8(text));
            if (match.hasMatch())
                byStep[match.captured(1).toInt()] = match.captured(2).toDouble();
        }
        return byStep;
    }

    nlohmann::json summary() const
    {
        const QByteArray last = out.trimmed().split('\n').last();
        return nlohmann::json::parse(last.toStdString(), nullptr, false);
    }
};

Run runProgram(const QString& program, const QStringList& arguments, int timeoutMs = 300000)
{
    QProcess process;
    process.start(QStringLiteral(CROWDTRAIN_BIN_DIR "/") + program, arguments);
    if (!process.waitForFinished(timeoutMs)) {
        process.kill();
        process.waitForFinished();
        qFatal("%s did not finish", qPrintable(program));
    }
    return {process.exitStatus() == QProcess::NormalExit ? process.exitCode() : -1, process.readAllStandardOutput(),
        QString::fromUtf8(process.readAllStandardError())};
}

QString q(const std::filesystem::path& path)
{
    return QString::fromStdString(path.string());
}

} // namespace

class TestTrainCli : public QObject {
    Q_OBJECT

    QTemporaryDir m_dir;
    std::filesystem::path m_root;
    std::filesystem::path m_data;

    std::filesystem::path dir() const { return m_root; }

    // A small char-level model that learns quickly on one core.
    QStringList modelFlags(int maxIters, int decayIters) const
    {
        return {u"--data"_s, q(m_data), u"--n-layer"_s, u"2"_s, u"--n-head"_s, u"2"_s, u"--n-embd"_s, u"32"_s,
            u"--block-size"_s, u"32"_s, u"--learning-rate"_s, u"3e-3"_s, u"--min-lr"_s, u"3e-4"_s, u"--warmup-iters"_s,
            u"5"_s, u"--lr-decay-iters"_s, QString::number(decayIters), u"--max-iters"_s, QString::number(maxIters),
            u"--eval-iters"_s, u"4"_s, u"--log-interval"_s, u"1"_s, u"--device"_s, u"cpu"_s, u"--seed"_s, u"7"_s};
    }

private slots:
    void initTestCase()
    {
        m_root = m_dir.path().toStdString();
        // 200 kB of synthetic text: enough for the loss to fall in tens of
        // steps, small enough to prepare in a moment.
        crowdtrain::testing::writeSyntheticCorpus(dir() / "corpus.txt", 200000);
        m_data = dir() / "data";
        const Run prepared = runProgram(u"crowdtrain-prepare"_s,
            {q(dir() / "corpus.txt"), u"--out"_s, q(m_data), u"--tokenizer"_s, u"char"_s, u"--val-fraction"_s,
                u"0.1"_s});
        QVERIFY2(prepared.exitCode == 0, qPrintable(prepared.err));
    }

    // Progress lines for every step, a falling loss, a JSON summary with
    // every field, and the checkpoint and export written.
    void trainsAndSummarises()
    {
        QStringList flags = modelFlags(100, 100);
        flags << u"--batch-size"_s << u"8"_s << u"--eval-interval"_s << u"50"_s << u"--checkpoint"_s
              << q(dir() / "a.ckpt") << u"--export"_s << q(dir() / "a-export");
        const Run run = runProgram(u"crowdtrain-train"_s, flags);
        QVERIFY2(run.exitCode == 0, qPrintable(run.err));
        QVERIFY(run.err.contains(u"model: "_s));

        const auto losses = run.losses();
        QCOMPARE(int(losses.size()), 100);
        QVERIFY2(losses.at(1) > 3.5, "a fresh model's loss is near ln(vocab)");
        // One step's loss is one small batch's: the last ten steps' mean is
        // the steadier reading of where training got to.
        double last10 = 0;
        for (int step = 91; step <= 100; ++step)
            last10 += losses.at(step) / 10;
        QVERIFY2(last10 < losses.at(1) - 0.8, qPrintable(QString::number(last10)));
        QCOMPARE(run.out.count("eval step "), 2);

        const auto summary = run.summary();
        QVERIFY2(summary.is_object(), run.out.constData());
        for (const char* key : {"final_train_loss", "final_val_loss", "tokens_per_second", "steps", "device",
                 "wall_seconds", "peak_rss_bytes"})
            QVERIFY2(summary.contains(key), key);
        QCOMPARE(summary["steps"].get<int>(), 100);
        QCOMPARE(summary["device"].get<std::string>(), std::string("cpu"));
        QVERIFY(summary["final_val_loss"].get<double>() < losses.at(1) - 0.8);
        QVERIFY(summary["final_train_loss"].get<double>() < losses.at(1) - 0.8);
        QVERIFY(summary["tokens_per_second"].get<double>() > 0);
        QVERIFY(summary["peak_rss_bytes"].get<double>() > 1e6);
        // The mean step and its phases: each non-negative, the forward and
        // backward passes some time, and together no more than the step.
        // (Which phase is largest is a timing, not asserted: under CPU
        // contention the update can take longer than the passes.)
        const auto& phases = summary["step_ms"];
        double phaseSum = 0;
        for (const char* key : {"data", "forward_backward", "update"}) {
            QVERIFY2(phases.contains(key), key);
            QVERIFY2(phases[key].get<double>() >= 0, key);
            phaseSum += phases[key].get<double>();
        }
        QVERIFY(phases["forward_backward"].get<double>() > 0);
        QVERIFY2(phaseSum <= phases["mean"].get<double>() * (1 + 1e-9), phases.dump().c_str());

        QVERIFY(std::filesystem::file_size(dir() / "a.ckpt") > 0);
        QVERIFY(std::filesystem::exists(dir() / "a-export/model.safetensors"));
        QVERIFY(std::filesystem::exists(dir() / "a-export/config.json"));
    }

    // Twenty steps, stop, resume to forty: the same losses as forty steps in
    // one run (bit-exact resume on CPU), and the same final evaluation.
    void resumeMatchesAStraightRun()
    {
        const QStringList common
            = QStringList{u"--batch-size"_s, u"4"_s, u"--eval-interval"_s, u"20"_s, u"--threads"_s, u"1"_s};
        const Run straight = runProgram(u"crowdtrain-train"_s, modelFlags(40, 40) + common);
        QVERIFY2(straight.exitCode == 0, qPrintable(straight.err));
        const Run first = runProgram(
            u"crowdtrain-train"_s, modelFlags(20, 40) + common + QStringList{u"--checkpoint"_s, q(dir() / "b.ckpt")});
        QVERIFY2(first.exitCode == 0, qPrintable(first.err));
        const Run second = runProgram(
            u"crowdtrain-train"_s, modelFlags(40, 40) + common + QStringList{u"--resume"_s, q(dir() / "b.ckpt")});
        QVERIFY2(second.exitCode == 0, qPrintable(second.err));

        const auto whole = straight.losses();
        auto pieces = first.losses();
        pieces.merge(second.losses());
        QCOMPARE(int(pieces.size()), 40);
        for (int step = 1; step <= 40; ++step)
            QVERIFY2(pieces.at(step) == whole.at(step), qPrintable(u"step %1"_s.arg(step)));
        QCOMPARE(second.summary()["final_val_loss"].get<double>(), straight.summary()["final_val_loss"].get<double>());
        QCOMPARE(second.summary()["steps"].get<int>(), 40);
    }

    // Sampling from the export: the prompt and its continuation,
    // reproducible by seed.
    void samplesFromTheExport()
    {
        const auto exported = dir() / "a-export/model.safetensors";
        QVERIFY2(std::filesystem::exists(exported),
            qPrintable(u"missing input (trainsAndSummarises exports it): "_s + q(exported)));
        auto sample = [&](const QString& seed) {
            return runProgram(u"crowdtrain-train"_s,
                {u"sample"_s, u"--checkpoint"_s, q(dir() / "a-export"), u"--tokenizer-dir"_s, q(m_data / "tokenizer"),
                    u"--prompt"_s, u"ROMEO:"_s, u"--max-new-tokens"_s, u"80"_s, u"--seed"_s, seed});
        };
        const Run one = sample(u"1"_s), again = sample(u"1"_s), other = sample(u"2"_s);
        QVERIFY2(one.exitCode == 0, qPrintable(one.err));
        QVERIFY2(one.out.startsWith("ROMEO:"), one.out.constData());
        QCOMPARE(one.out.size(), qsizetype(6 + 80 + 1)); // the prompt, 80 one-byte characters, a newline
        QCOMPARE(one.out, again.out);
        QVERIFY(one.out != other.out);

        const Run missing = runProgram(u"crowdtrain-train"_s,
            {u"sample"_s, u"--checkpoint"_s, q(dir() / "nowhere"), u"--tokenizer-dir"_s, q(m_data / "tokenizer")});
        QCOMPARE(missing.exitCode, 1);
        QVERIFY2(missing.err.contains(u"nowhere"_s), qPrintable(missing.err));
    }

    // Two processes (c10d Gloo on loopback) with batch 4 each take the same
    // steps as one process with batch 8, and evaluate the same windows.
    void nprocMatchesOneProcessWithTheDoubleBatch()
    {
        const QStringList common = {u"--eval-interval"_s, u"0"_s, u"--threads"_s, u"1"_s};
        const Run one
            = runProgram(u"crowdtrain-train"_s, modelFlags(12, 12) + common + QStringList{u"--batch-size"_s, u"8"_s});
        QVERIFY2(one.exitCode == 0, qPrintable(one.err));
        const Run two = runProgram(u"crowdtrain-train"_s,
            modelFlags(12, 12) + common
                + QStringList{
                    u"--batch-size"_s, u"4"_s, u"--nproc"_s, u"2"_s, u"--master-port"_s, QString::number(freePort())});
        QVERIFY2(two.exitCode == 0, qPrintable(two.err));
        const auto a = one.losses(), b = two.losses();
        QCOMPARE(int(b.size()), 12);
        for (int step = 1; step <= 12; ++step)
            QVERIFY2(std::abs(a.at(step) - b.at(step)) <= 2e-4,
                qPrintable(u"step %1: %2 vs %3"_s.arg(step).arg(a.at(step)).arg(b.at(step))));
        QVERIFY(std::abs(one.summary()["final_val_loss"].get<double>() - two.summary()["final_val_loss"].get<double>())
            < 1e-3);
    }

    void badArgumentsFailClearly_data()
    {
        QTest::addColumn<QStringList>("arguments");
        QTest::addColumn<QString>("message");
        QTest::newRow("no data") << QStringList{u"--max-iters"_s, u"1"_s} << u"--data DIR is required"_s;
        QTest::newRow("missing folder") << QStringList{u"--data"_s, u"/nonexistent/crowdtrain"_s}
                                        << u"/nonexistent/crowdtrain"_s;
        QTest::newRow("unknown device") << QStringList{u"--device"_s, u"tpu"_s} << u"unknown device 'tpu'"_s;
        QTest::newRow("no cuda") << QStringList{u"--device"_s, u"cuda:3"_s} << u"CUDA is not available"_s;
        QTest::newRow("heads do not divide") << QStringList{u"--n-head"_s, u"3"_s} << u"n_head"_s;
        QTest::newRow("rank outside nproc")
            << QStringList{u"--nproc"_s, u"2"_s, u"--rank"_s, u"2"_s} << u"outside --nproc 2"_s;
        QTest::newRow("not a number") << QStringList{u"--max-iters"_s, u"many"_s} << u"max-iters"_s;
        QTest::newRow("unknown sampling") << QStringList{u"--sampling"_s, u"sweep"_s} << u"not 'sweep'"_s;
    }

    void badArgumentsFailClearly()
    {
        QFETCH(QStringList, arguments);
        QFETCH(QString, message);
        QStringList flags = modelFlags(2, 2);
        // Later flags win; "no data" drops --data altogether.
        if (QTest::currentDataTag() == QByteArray("no data"))
            flags = flags.mid(2);
        const Run run = runProgram(u"crowdtrain-train"_s, flags + QStringList{u"--batch-size"_s, u"2"_s} + arguments);
        QVERIFY(run.exitCode != 0);
        QVERIFY2(run.err.contains(message), qPrintable(run.err));
        QVERIFY(run.losses().empty());
    }

    // A truncated shard is refused by name before any step is taken.
    void truncatedShardIsNamed()
    {
        const auto copy = dir() / "broken";
        std::filesystem::copy(m_data, copy, std::filesystem::copy_options::recursive);
        std::filesystem::path shard;
        for (const auto& entry : std::filesystem::directory_iterator(copy))
            if (entry.path().extension() == ".bin")
                shard = entry.path();
        QVERIFY(!shard.empty());
        std::filesystem::resize_file(shard, std::filesystem::file_size(shard) - 7);
        QStringList flags = modelFlags(2, 2);
        flags[1] = q(copy);
        const Run run = runProgram(u"crowdtrain-train"_s, flags + QStringList{u"--batch-size"_s, u"2"_s});
        QCOMPARE(run.exitCode, 1);
        QVERIFY2(run.err.contains(q(shard.filename())), qPrintable(run.err));
        QVERIFY(run.losses().empty());
    }
};

QTEST_GUILESS_MAIN(TestTrainCli)
#include "tst_train_cli.moc"
