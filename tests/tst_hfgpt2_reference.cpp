// The exported folder, read and run by an independent GPT-2 in Python
// (tests/hf_gpt2_reference.py: transformers' names, layouts and math), gives
// the logits of Gpt::forward. Stands in for GPT2LMHeadModel.from_pretrained.
#include "tests/hf_gpt2_fixtures.h"

#include "engine/hf_gpt2.h"

#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QTest>

using namespace crowdtrain;
using namespace crowdtrain::engine;
using namespace crowdtrain::engine::testing;

namespace {

const QString kPython = QStringLiteral("/usr/bin/python3"); // the Debian Python, with torch (the one on PATH may not)

// Why kPython cannot run the reference (empty when it can).
QString pythonProblem()
{
    QProcess probe;
    probe.setProcessChannelMode(QProcess::MergedChannels);
    probe.start(kPython, {QStringLiteral("-c"), QStringLiteral("import torch")});
    if (!probe.waitForFinished(60000))
        return kPython + QStringLiteral(" did not start or finish: ") + probe.errorString();
    if (probe.exitStatus() != QProcess::NormalExit || probe.exitCode() != 0)
        return kPython + QStringLiteral(" cannot import torch: ") + QString::fromUtf8(probe.readAll().right(2000));
    return {};
}

} // namespace

class TestHfGpt2Reference : public QObject {
    Q_OBJECT

private slots:
    void initTestCase()
    {
        torch::manual_seed(4321);
        QVERIFY(m_dir.isValid());
    }

    void logitsMatchGptForward()
    {
        // The reference is an input of this test: without it the test fails.
        const QString problem = pythonProblem();
        QVERIFY2(problem.isEmpty(), qPrintable(problem));
        const GptConfig config = smallConfig();
        Gpt model = randomModel(config);
        const auto dir = path("export");
        QVERIFY(exportHuggingFaceGpt2(dir, config, parametersOf(model)).ok());

        const torch::Tensor tokens = torch::randint(config.vocabSize, {1, config.blockSize}, torch::kLong);
        QStringList ids;
        for (std::int64_t i = 0; i < tokens.size(1); ++i)
            ids << QString::number(tokens[0][i].item<std::int64_t>());
        const auto out = path("logits.safetensors");
        QProcess reference;
        reference.setProcessChannelMode(QProcess::MergedChannels);
        reference.start(kPython,
            {QStringLiteral(CROWDTRAIN_SOURCE_DIR "/tests/hf_gpt2_reference.py"), QString::fromStdString(dir.string()),
                QStringLiteral("--tokens"), ids.join(QLatin1Char(',')), QStringLiteral("--out"),
                QString::fromStdString(out.string())});
        QVERIFY(reference.waitForFinished(120000));
        const QByteArray output = reference.readAll();
        QVERIFY2(reference.exitStatus() == QProcess::NormalExit && reference.exitCode() == 0, output.constData());

        // Written by the script's own safetensors writer: our reader must agree.
        auto logits = readSafetensors(out);
        QVERIFY2(logits.ok(), logits.ok() ? "" : logits.error().message.c_str());
        QCOMPARE(logits->tensors.size(), std::size_t(1));
        const torch::Tensor expected = logits->tensors[0].second;
        QCOMPARE(expected.sizes().vec(), (std::vector<std::int64_t>{config.blockSize, config.vocabSize}));
        torch::NoGradGuard noGrad;
        const torch::Tensor ours = model->forward(tokens)[0];
        const double maxDiff = (ours - expected).abs().max().item<double>();
        qInfo("max |logit difference| = %g over logits of std %g", maxDiff, expected.std().item<double>());
        QVERIFY2(maxDiff < 1e-4, qPrintable(QString::number(maxDiff)));
        QVERIFY(expected.std().item<double>() > 0.1); // not trivially zero

        // The script's config checks are live: an untied config is refused.
        QJsonObject json = readJson(dir / "config.json");
        json.insert(QStringLiteral("tie_word_embeddings"), false);
        std::ofstream(dir / "config.json") << QJsonDocument(json).toJson().toStdString();
        reference.start(kPython,
            {QStringLiteral(CROWDTRAIN_SOURCE_DIR "/tests/hf_gpt2_reference.py"), QString::fromStdString(dir.string()),
                QStringLiteral("--tokens"), QStringLiteral("1")});
        QVERIFY(reference.waitForFinished(120000));
        QCOMPARE(reference.exitCode(), 1);
        QVERIFY(reference.readAll().contains("tie_word_embeddings"));
    }

private:
    std::filesystem::path path(const std::string& name) const
    {
        return std::filesystem::path(m_dir.path().toStdString()) / name;
    }

    QTemporaryDir m_dir;
};

QTEST_GUILESS_MAIN(TestHfGpt2Reference)
#include "tst_hfgpt2_reference.moc"
