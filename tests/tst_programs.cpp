// Every program answers --version and --help, and rejects unknown options.
#include "crowdtrain/version.h"

#include <QProcess>
#include <QTest>

class TestPrograms : public QObject {
    Q_OBJECT

private:
    struct Run {
        int exitCode;
        QString out;
        QString err;
    };

    static Run run(const QString& program, const QStringList& arguments)
    {
        QProcess process;
        process.start(QStringLiteral(CROWDTRAIN_BIN_DIR "/") + program, arguments);
        if (!process.waitForFinished(60000))
            qFatal("%s did not finish", qPrintable(program));
        return {process.exitStatus() == QProcess::NormalExit ? process.exitCode() : -1,
            QString::fromUtf8(process.readAllStandardOutput()), QString::fromUtf8(process.readAllStandardError())};
    }

private slots:
    void version_data()
    {
        QTest::addColumn<QString>("program");
        for (const char* name :
            {"crowdtrain", "crowdtrain-worker", "crowdtrain-server", "crowdtrain-prepare", "crowdtrain-train"})
            QTest::newRow(name) << QString::fromLatin1(name);
    }

    void version()
    {
        QFETCH(QString, program);
        const Run result = run(program, {QStringLiteral("--version")});
        QCOMPARE(result.exitCode, 0);
        QCOMPARE(result.out.trimmed(), program + QLatin1Char(' ') + QString::fromLatin1(crowdtrain::kVersion));
    }

    void help_data() { version_data(); }

    void help()
    {
        QFETCH(QString, program);
        const Run result = run(program, {QStringLiteral("--help")});
        QCOMPARE(result.exitCode, 0);
        QVERIFY2(result.out.contains(QStringLiteral("Usage:")), qPrintable(result.out));
        QVERIFY(result.out.contains(QStringLiteral("--version")));
    }

    void unknownOptionFails_data() { version_data(); }

    void unknownOptionFails()
    {
        QFETCH(QString, program);
        const Run result = run(program, {QStringLiteral("--no-such-option")});
        QVERIFY(result.exitCode != 0);
        QVERIFY2(result.err.contains(QStringLiteral("no-such-option")), qPrintable(result.err));
    }

    // A number option that is not a number is a message naming it and exit
    // status 2, before anything runs.
    void badNumberIsUsageError_data()
    {
        QTest::addColumn<QString>("program");
        QTest::addColumn<QString>("option");
        QTest::newRow("worker") << QStringLiteral("crowdtrain-worker") << QStringLiteral("--top-k");
        QTest::newRow("server") << QStringLiteral("crowdtrain-server") << QStringLiteral("--threads");
        QTest::newRow("prepare") << QStringLiteral("crowdtrain-prepare") << QStringLiteral("--val-fraction");
        QTest::newRow("train") << QStringLiteral("crowdtrain-train") << QStringLiteral("--max-iters");
    }

    void badNumberIsUsageError()
    {
        QFETCH(QString, program);
        QFETCH(QString, option);
        const Run result = run(program, {option, QStringLiteral("many")});
        QCOMPARE(result.exitCode, 2);
        QVERIFY2(result.err.contains(option), qPrintable(result.err));
    }
};

QTEST_GUILESS_MAIN(TestPrograms)
#include "tst_programs.moc"
