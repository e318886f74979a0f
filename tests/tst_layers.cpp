// The layers stay clean (docs/architecture.md, "Layers and link graph"):
// engine/ knows nothing of Qt or ZeroMQ, net/ nothing of Qt, ui/ never
// includes libtorch, ZeroMQ or msgpack.
#include <QDirIterator>
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
