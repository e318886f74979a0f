// Model configs by name, validation, and GPT-2's parameter counts.
#include "engine/gpt_config.h"

#include <QTest>

using namespace crowdtrain::engine;

class TestGptConfig : public QObject {
    Q_OBJECT

private slots:
    void parameterCounts_data()
    {
        QTest::addColumn<QString>("name");
        QTest::addColumn<qint64>("expected");
        // GPT-2's sizes with the LM head tied (vocab 50257, context 1024).
        QTest::newRow("gpt2") << QStringLiteral("gpt2") << qint64(124439808);
        QTest::newRow("gpt2-medium") << QStringLiteral("gpt2-medium") << qint64(354823168);
        QTest::newRow("gpt2-large") << QStringLiteral("gpt2-large") << qint64(774030080);
        QTest::newRow("gpt2-xl") << QStringLiteral("gpt2-xl") << qint64(1557611200);
    }

    void parameterCounts()
    {
        QFETCH(QString, name);
        QFETCH(qint64, expected);
        auto config = gptConfigByName(name.toStdString());
        QVERIFY(config.ok());
        QVERIFY(validate(*config).ok());
        QCOMPARE(parameterCount(*config), expected);
    }

    void unknownNameIsAnError()
    {
        auto config = gptConfigByName("gpt5");
        QVERIFY(!config.ok());
        QCOMPARE(config.error().code, std::string("unknown_model"));
        QVERIFY(config.error().message.find("gpt2-xl") != std::string::npos);
    }

    void validation_data()
    {
        QTest::addColumn<qint64>("nHead");
        QTest::addColumn<qint64>("nEmbd");
        QTest::addColumn<qint64>("vocab");
        QTest::addColumn<bool>("valid");
        QTest::newRow("ok") << qint64(4) << qint64(128) << qint64(65) << true;
        QTest::newRow("embd not divisible") << qint64(3) << qint64(128) << qint64(65) << false;
        QTest::newRow("zero heads") << qint64(0) << qint64(128) << qint64(65) << false;
        QTest::newRow("vocab too big for uint16") << qint64(4) << qint64(128) << qint64(70000) << false;
    }

    void validation()
    {
        QFETCH(qint64, nHead);
        QFETCH(qint64, nEmbd);
        QFETCH(qint64, vocab);
        QFETCH(bool, valid);
        GptConfig config;
        config.nHead = nHead;
        config.nEmbd = nEmbd;
        config.vocabSize = vocab;
        QCOMPARE(validate(config).ok(), valid);
    }
};

QTEST_GUILESS_MAIN(TestGptConfig)
#include "tst_gptconfig.moc"
