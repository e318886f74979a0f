// Bounded decoding of untrusted msgpack bytes.
#include "net/wire/envelope.h"
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

    // An ext is refused wherever it is, as too_large (section 2), also where
    // a field of another type is expected: as the body, or a timestamp
    // (ext -1) as a field's value.
    void anExtIsTooLargeEvenAsAField_data()
    {
        QTest::addColumn<QByteArray>("bytes");
        // {"v":1,"type":"list_projects","id":5,"body": ...}
        const QByteArray head = QByteArray("\x84\xa1v\x01\xa4type\xadlist_projects\xa2id\x05\xa4"
                                           "body",
            32);
        QTest::newRow("fixext 4 as the body") << head + QByteArray("\xd6\x01\x00\x00\x00\x00", 6);
        QTest::newRow("ext 8 of 0 bytes as the body") << head + QByteArray("\xc7\x00\x05", 3);
        QTest::newRow("timestamp 32 in a field") << head + QByteArray("\x81\xa7project\xd6\xff\x00\x00\x00\x01", 15);
        QTest::newRow("timestamp 96 under an unknown key")
            << head + QByteArray("\x81\xa1x\xc7\x0c\xff", 6) + QByteArray(12, '\0');
    }

    void anExtIsTooLargeEvenAsAField()
    {
        QFETCH(QByteArray, bytes);
        auto envelope
            = decodeEnvelope(std::string_view(bytes.constData(), std::size_t(bytes.size())), EnvelopeKind::Request);
        QVERIFY(!envelope.ok());
        QCOMPARE(envelope.error().code, std::string("too_large"));
        // Without the ext the same request decodes.
        const QByteArray head = bytes.left(32);
        auto sound = decodeEnvelope(std::string(head.constData(), 32) + "\x80", EnvelopeKind::Request);
        QVERIFY2(sound.ok(), sound ? "" : sound.error().message.c_str());
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
