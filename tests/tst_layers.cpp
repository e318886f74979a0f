// The layers stay clean (docs/architecture.md, "Layers and link graph"):
// engine/ knows nothing of Qt or ZeroMQ, net/ nothing of Qt, ui/ never
// includes libtorch, ZeroMQ or msgpack.
#include <QDirIterator>
#include <QProcess>
#include <QRegularExpression>
#include <QTest>

// `#include <X>` or `#include "X"` where X matches one of the alternatives.
static QString includePattern(const QString& alternatives)
{
    return QStringLiteral("#include\\s*[<\"](") + alternatives + QStringLiteral(")[>\"]");
}

class TestLayers : public QObject {
    Q_OBJECT

private slots:
    void noForbiddenIncludes_data()
    {
        QTest::addColumn<QString>("folder");
        QTest::addColumn<QString>("forbidden");
        const QString engineBans = QStringLiteral("Q[A-Za-z]*|Qt[A-Za-z]*/.*|zmq.*|msgpack.*|sqlite3.*|net/.*|ui/.*");
        const QString netBans = QStringLiteral("Q[A-Za-z]*|Qt[A-Za-z]*/.*|ui/.*");
        // The GUI reaches the daemon only through net's control-API client:
        // no engine, no coordinator or volunteer agent.
        const QString uiBans
            = QStringLiteral("torch/.*|ATen/.*|c10/.*|zmq.*|msgpack.*|engine/.*|net/coordinator/.*|net/volunteer/.*");
        // core/ is below every layer: libc and the standard library only.
        const QString coreBans = QStringLiteral(
            "Q[A-Za-z]*|Qt[A-Za-z]*/.*|torch/.*|ATen/.*|c10/.*|zmq.*|msgpack.*|sqlite3.*|net/.*|ui/.*|engine/.*");
        QTest::newRow("core: nothing above it") << QStringLiteral("core") << includePattern(coreBans);
        QTest::newRow("engine: no Qt, ZeroMQ, msgpack, SQLite")
            << QStringLiteral("engine") << includePattern(engineBans);
        QTest::newRow("net: no Qt") << QStringLiteral("net") << includePattern(netBans);
        QTest::newRow("ui: no libtorch, ZeroMQ, msgpack, engine, coordinator, volunteer")
            << QStringLiteral("ui") << includePattern(uiBans);
        // The daemon and its volunteer agent never load libtorch: training
        // and sampling run in crowdtrain-core (net/core_service). The agent
        // may use the engine's plain C++ parts (crowdtrain_text, the codecs);
        // the daemon no engine header at all.
        const QString torch = QStringLiteral("torch/.*|ATen/.*|c10/.*");
        const QString torchEngine
            = QStringLiteral("engine/(?!(batch_source|batch_sampler|token_shard|gpt_config|"
                             "error_codes|lr_schedule|diloco/(codec|sparse_codec|manifest|submission_encoder))"
                             "\\.h).*");
        QTest::newRow("net/daemon: no libtorch, no engine")
            << QStringLiteral("net/daemon") << includePattern(torch + QStringLiteral("|engine/.*|net/core_service/.*"));
        QTest::newRow("net/volunteer: no libtorch, only the engine's plain C++")
            << QStringLiteral("net/volunteer")
            << includePattern(torch + QLatin1Char('|') + torchEngine + QStringLiteral("|net/core_service/.*"));
        QTest::newRow("net/core_link: no libtorch, only the engine's plain C++")
            << QStringLiteral("net/core_link") << includePattern(torch + QLatin1Char('|') + torchEngine);
    }

    void noForbiddenIncludes()
    {
        QFETCH(QString, folder);
        QFETCH(QString, forbidden);
        const QRegularExpression pattern(forbidden);
        QStringList offenders;
        int files = 0;
        QDirIterator it(QStringLiteral(CROWDTRAIN_SOURCE_DIR "/") + folder,
            {QStringLiteral("*.h"), QStringLiteral("*.cpp")}, QDir::Files, QDirIterator::Subdirectories);
        while (it.hasNext()) {
            QFile file(it.next());
            QVERIFY(file.open(QIODevice::ReadOnly));
            ++files;
            int lineNumber = 0;
            while (!file.atEnd()) {
                const QString line = QString::fromUtf8(file.readLine());
                ++lineNumber;
                if (pattern.match(line).hasMatch())
                    offenders << file.fileName() + QLatin1Char(':') + QString::number(lineNumber) + QLatin1String(": ")
                            + line.trimmed();
            }
        }
        QVERIFY2(files > 0, "no sources found: wrong folder?");
        QVERIFY2(offenders.isEmpty(), qPrintable(offenders.join(QLatin1Char('\n'))));
    }

    // Only crowdtrain-core loads libtorch: the daemon, the command-line
    // client and the desktop app do not (ldd lists what each one maps).
    void onlyTheCoreLinksLibtorch_data()
    {
        QTest::addColumn<QString>("program");
        QTest::addColumn<bool>("torch");
        QTest::newRow("crowdtrain-core") << QStringLiteral("crowdtrain-core") << true;
        QTest::newRow("crowdtrain-daemon") << QStringLiteral("crowdtrain-daemon") << false;
        QTest::newRow("crowdtrain-worker") << QStringLiteral("crowdtrain-worker") << false;
        QTest::newRow("crowdtrain") << QStringLiteral("crowdtrain") << false;
    }
    void onlyTheCoreLinksLibtorch()
    {
        QFETCH(QString, program);
        QFETCH(bool, torch);
        QProcess ldd;
        ldd.start(QStringLiteral("ldd"), {QStringLiteral(CROWDTRAIN_BIN_DIR "/") + program});
        QVERIFY(ldd.waitForFinished(60000));
        QCOMPARE(ldd.exitCode(), 0);
        const QString libraries = QString::fromUtf8(ldd.readAllStandardOutput());
        QVERIFY2(libraries.contains(QStringLiteral("libc.so")), qPrintable(libraries)); // ldd really listed them
        const bool found
            = libraries.contains(QStringLiteral("libtorch")) || libraries.contains(QStringLiteral("libc10"));
        QVERIFY2(found == torch, qPrintable(program + QStringLiteral(":\n") + libraries));
    }

    // The pattern itself works: a known-bad line is caught.
    void patternCatchesLeak()
    {
        const QRegularExpression pattern(includePattern(QStringLiteral("torch/.*|zmq.*")));
        QVERIFY(pattern.match(QStringLiteral("#include <torch/torch.h>")).hasMatch());
        QVERIFY(!pattern.match(QStringLiteral("#include \"ui/series_chart.h\"")).hasMatch());
        const QRegularExpression ui(includePattern(QStringLiteral("engine/.*|net/coordinator/.*|net/volunteer/.*")));
        QVERIFY(ui.match(QStringLiteral("#include \"net/coordinator/ledger.h\"")).hasMatch());
        QVERIFY(ui.match(QStringLiteral("#include \"engine/gpt.h\"")).hasMatch());
        QVERIFY(!ui.match(QStringLiteral("#include \"net/wire/messages.h\"")).hasMatch());
    }
};

QTEST_GUILESS_MAIN(TestLayers)
#include "tst_layers.moc"
