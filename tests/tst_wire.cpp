// Bounded decoding of untrusted msgpack bytes.
#include "net/wire/unpack.h"

#include <QTest>
#include <sstream>

using namespace crowdtrain::net;

namespace {

template <typename T> std::string pack(const T& value)
{
    std::stringstream buffer;
    msgpack::pack(buffer, value);
    return buffer.str();
}

} // namespace

class TestWire : public QObject {
    Q_OBJECT

private slots:
    void roundTrip()
    {
        const std::map<std::string, int> message{{"round", 7}, {"tokens", 4096}};
        const std::string bytes = pack(message);
        auto decoded = unpackUntrusted(bytes.data(), bytes.size());
        QVERIFY(decoded.ok());
        QCOMPARE((decoded->get().as<std::map<std::string, int>>()), message);
    }

    void rejects_data()
    {
        QTest::addColumn<QByteArray>("bytes");
        QTest::addColumn<QString>("code");
        const std::string good = pack(std::vector<int>{1, 2, 3});
        QTest::newRow("truncated") << QByteArray(good.data(), int(good.size()) - 1) << QStringLiteral("malformed");
        QTest::newRow("trailing") << QByteArray::fromStdString(good + good) << QStringLiteral("trailing_bytes");
        QTest::newRow("reserved byte 0xc1") << QByteArray("\xc1", 1) << QStringLiteral("malformed");
        // An array header claiming 2^32-1 elements must not allocate them.
        QTest::newRow("huge array header") << QByteArray("\xdd\xff\xff\xff\xff", 5) << QStringLiteral("limit_exceeded");
        QTest::newRow("empty") << QByteArray() << QStringLiteral("malformed");
    }

    void rejects()
    {
        QFETCH(QByteArray, bytes);
        QFETCH(QString, code);
        auto decoded = unpackUntrusted(bytes.constData(), std::size_t(bytes.size()));
        QVERIFY(!decoded.ok());
        QCOMPARE(QString::fromStdString(decoded.error().code), code);
    }

    void capsNesting()
    {
        std::vector<std::vector<std::vector<int>>> nested{{{1}}};
        const std::string bytes = pack(nested);
        UnpackLimits limits;
        limits.maxDepth = 2;
        auto decoded = unpackUntrusted(bytes.data(), bytes.size(), limits);
        QVERIFY(!decoded.ok());
        QCOMPARE(decoded.error().code, std::string("limit_exceeded"));
    }

    void capsSize()
    {
        const std::string bytes = pack(std::string(100, 'x'));
        UnpackLimits limits;
        limits.maxBytes = 50;
        auto decoded = unpackUntrusted(bytes.data(), bytes.size(), limits);
        QVERIFY(!decoded.ok());
        QCOMPARE(decoded.error().code, std::string("too_large"));
    }
};

QTEST_GUILESS_MAIN(TestWire)
#include "tst_wire.moc"
