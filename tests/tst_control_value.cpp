// Value, the control API's dynamic value (net/control/value.h): its kinds
// and accessors, its msgpack form (encode, the bounded decode, checkLimits)
// and its JSON form (toJson, fromJson). No sockets: tst_control_api has them.
#include "control_fixtures.h"
#include "net/control/value.h"

#include <QTest>

#include <cmath>
#include <limits>
#include <string>

using namespace crowdtrain;
using namespace crowdtrain::control;
using crowdtrain::testing::nestedArrays;

class TestControlValue : public QObject {
    Q_OBJECT

private slots:
    // ---- Value and msgpack ------------------------------------------------

    void roundTrip_data()
    {
        QTest::addColumn<Value>("value");
        QTest::newRow("nil") << Value();
        QTest::newRow("true") << Value(true);
        QTest::newRow("false") << Value(false);
        QTest::newRow("zero") << Value(0);
        QTest::newRow("fixint") << Value(127);
        QTest::newRow("uint8") << Value(200);
        QTest::newRow("uint16") << Value(65535);
        QTest::newRow("uint32") << Value(uint64_t(1) << 32);
        QTest::newRow("int64 max") << Value(std::numeric_limits<int64_t>::max());
        QTest::newRow("uint64 above int64") << Value(uint64_t(1) << 63);
        QTest::newRow("uint64 max") << Value(std::numeric_limits<uint64_t>::max());
        QTest::newRow("negative fixint") << Value(-32);
        QTest::newRow("int8") << Value(-33);
        QTest::newRow("int16") << Value(-30000);
        QTest::newRow("int64 min") << Value(std::numeric_limits<int64_t>::min());
        QTest::newRow("double") << Value(0.1);
        QTest::newRow("negative double") << Value(-1.5e300);
        QTest::newRow("integral double") << Value(2.0);
        QTest::newRow("infinity") << Value(std::numeric_limits<double>::infinity());
        QTest::newRow("empty string") << Value("");
        QTest::newRow("utf-8 string") << Value("héllo, 世界 😀");
        QTest::newRow("long string") << Value(std::string(70000, 'x'));
        QTest::newRow("binary") << Value::binary(std::string("\0\x01\xff\x80", 4));
        QTest::newRow("empty binary") << Value::binary("");
        QTest::newRow("empty array") << Value::array();
        QTest::newRow("empty map") << Value::map();
        Value mixed = Value::array();
        mixed.push(1);
        mixed.push("two");
        mixed.push(Value::map().set("three", 3.0).set("four", Value::binary("4")));
        mixed.push(Value());
        QTest::newRow("mixed array") << mixed;
        QTest::newRow("nested map") << Value::map()
                                           .set("project", "tiny-shakespeare")
                                           .set("paused", false)
                                           .set("steps", uint64_t(123456789012))
                                           .set("loss", Value::array())
                                           .set("gpu", Value::map().set("vram_bytes", int64_t(8) << 30));
        QTest::newRow("depth 8") << nestedArrays(8);
    }

    void roundTrip()
    {
        QFETCH(Value, value);
        auto decoded = decode(encode(value), DecodeLimits::reply());
        QVERIFY2(decoded.ok(), decoded.ok() ? "" : decoded.error().message.c_str());
        QCOMPARE(*decoded, value);
        QCOMPARE(decoded->kind(), value.kind());
    }

    void integersHaveOneForm()
    {
        QCOMPARE(Value(uint64_t(5)), Value(5));
        QCOMPARE(Value(uint64_t(5)).kind(), Value::Kind::Int);
        QCOMPARE(Value(std::numeric_limits<uint64_t>::max()).kind(), Value::Kind::UInt);
        QCOMPARE(Value(std::numeric_limits<uint64_t>::max()).toInt(-7), int64_t(-7));
        QCOMPARE(Value(-1).toUInt(9), uint64_t(9));
        QCOMPARE(Value(5).toUInt(), uint64_t(5));
        QCOMPARE(Value(5).toDouble(), 5.0);
        QVERIFY(Value(5).isNumber() && Value(5.5).isNumber() && !Value("5").isNumber());
        QCOMPARE(Value(5.5).toInt(3), int64_t(3)); // doubles do not convert to integers
        QCOMPARE(Value(5).toString("none"), std::string("none"));
        QCOMPARE(Value(1).toBool(false), false); // an integer is not a bool
        QVERIFY(Value(1) != Value(1.0));
        QVERIFY(Value("a") != Value::binary("a"));

        // The shortest formats, and any integer format reads the same.
        QCOMPARE(encode(Value(1)), std::string("\x01"));
        QCOMPARE(encode(Value(-1)), std::string("\xff"));
        QCOMPARE(encode(Value(200)), std::string("\xcc\xc8"));
        QCOMPARE(encode(Value(std::numeric_limits<uint64_t>::max())), std::string("\xcf") + std::string(8, '\xff'));
        QCOMPARE(*decode(std::string("\xd0\x05", 2)), Value(5));
        QCOMPARE(*decode(std::string("\xd3\0\0\0\0\0\0\0\x05", 9)), Value(5));
        // float 32 widens; doubles are sent as float 64.
        QCOMPARE(*decode(std::string("\xca\x3f\xc0\x00\x00", 5)), Value(1.5));
        QCOMPARE(encode(Value(1.5)).size(), std::size_t(9));
        QCOMPARE(encode(Value(2.0)), std::string("\xcb\x40\0\0\0\0\0\0\0", 9)); // not the integer 2
    }

    void mapsKeepOrderAndDistinctKeys()
    {
        Value map = Value::map().set("b", 1).set("a", 2).set("c", 3);
        map.set("a", "two");
        QCOMPARE(map.size(), std::size_t(3));
        QCOMPARE(map.entries()[0].first, std::string("b"));
        QCOMPARE(map.entries()[1].first, std::string("a"));
        QCOMPARE(map["a"], Value("two"));
        QVERIFY(map.has("c") && !map.has("d"));
        QVERIFY(map["d"].isNil());
        QVERIFY(Value(3)["x"].isNil());
        QVERIFY(map.at(0).isNil()); // not an array
        // Equality ignores the order of keys.
        QCOMPARE(Value::map().set("x", 1).set("y", 2), Value::map().set("y", 2).set("x", 1));
        QVERIFY(Value::map().set("x", 1) != Value::map().set("x", 2));
        QCOMPARE(map.take("c"), Value(3));
        QVERIFY(map["c"].isNil());

        Value array = Value::array();
        array.push(Value::map());
        QCOMPARE(array.size(), std::size_t(1));
        QVERIFY(array.at(1).isNil());
        // set() and push() turn other values into a map or an array.
        Value scalar = 5;
        scalar.set("k", true);
        QVERIFY(scalar.isMap());
        scalar.push(1);
        QVERIFY(scalar.isArray());
    }

    void decodeRefuses_data()
    {
        QTest::addColumn<QByteArray>("bytes");
        QTest::addColumn<QString>("code");
        const std::string message = encode(Value::map().set("key", "value").set("n", 12345));
        const QByteArray whole = QByteArray::fromStdString(message);
        QTest::newRow("empty") << QByteArray() << QStringLiteral("malformed");
        QTest::newRow("truncated") << whole.left(whole.size() - 1) << QStringLiteral("malformed");
        QTest::newRow("trailing bytes") << whole + QByteArray(1, '\0') << QStringLiteral("malformed");
        QTest::newRow("reserved byte 0xc1") << QByteArray("\xc1") << QStringLiteral("malformed");
        QTest::newRow("invalid utf-8 str") << QByteArray("\xa2\xc3\x28") << QStringLiteral("malformed");
        QTest::newRow("overlong utf-8") << QByteArray("\xa2\xc0\xaf") << QStringLiteral("malformed");
        QTest::newRow("integer key") << QByteArray("\x81\x01\x02") << QStringLiteral("malformed");
        QTest::newRow("duplicate key") << QByteArray("\x82\xa1k\x01\xa1k\x02") << QStringLiteral("malformed");
        QTest::newRow("ext") << QByteArray("\xd4\x01\x00", 3) << QStringLiteral("too_large");
        QTest::newRow("depth 9") << QByteArray::fromStdString(encode(nestedArrays(9))) << QStringLiteral("too_large");
        QTest::newRow("array header of 2^32-1") << QByteArray("\xdd\xff\xff\xff\xff") << QStringLiteral("too_large");
        Value manyKeys = Value::map();
        for (int i = 0; i <= 4096; ++i)
            manyKeys.set("k" + std::to_string(i), i);
        QTest::newRow("4097 map entries") << QByteArray::fromStdString(encode(manyKeys)) << QStringLiteral("too_large");
        QTest::newRow("string over 1 MiB") << QByteArray::fromStdString(encode(Value(std::string((1u << 20) + 1, 'x'))))
                                           << QStringLiteral("too_large");
    }

    void decodeRefuses()
    {
        QFETCH(QByteArray, bytes);
        QFETCH(QString, code);
        auto decoded = decode(bytes.toStdString(), DecodeLimits::reply());
        QVERIFY(!decoded.ok());
        QCOMPARE(QString::fromStdString(decoded.error().code), code);
    }

    void decodeLimits()
    {
        // The frame size is checked before anything is parsed.
        const std::string bytes = encode(Value(std::string(100, 'x')));
        DecodeLimits small;
        small.maxBytes = 50;
        QCOMPARE(decode(bytes, small).error().code, std::string("too_large"));
        QVERIFY(decode(bytes).ok());
        // A request's default frame limit is 1 MiB.
        QCOMPARE(decode(std::string((1u << 20) + 1, '\0')).error().code, std::string("too_large"));
        Value manyItems = Value::array();
        for (int i = 0; i <= 65536; ++i)
            manyItems.push(Value());
        QCOMPARE(decode(encode(manyItems), DecodeLimits::reply()).error().code, std::string("too_large"));
        manyItems.take("x"); // a no-op on an array
        QCOMPARE(manyItems.size(), std::size_t(65537));

        // checkLimits says what decode would say, without encoding.
        QVERIFY(checkLimits(nestedArrays(8)).ok());
        QCOMPARE(checkLimits(nestedArrays(9)).error().code, std::string("too_large"));
        QCOMPARE(checkLimits(manyItems).error().code, std::string("too_large"));
        QCOMPARE(checkLimits(Value(std::string("\xff", 1))).error().code, std::string("malformed"));
        QCOMPARE(checkLimits(Value::map().set(std::string("\xfe", 1), 1)).error().code, std::string("malformed"));
    }

    // ---- Value and JSON -----------------------------------------------------

    void json()
    {
        Value value = Value::map()
                          .set("name", "a \"quoted\"\\ line\n\x01")
                          .set("n", -5)
                          .set("big", std::numeric_limits<uint64_t>::max())
                          .set("x", 0.5)
                          .set("nan", std::nan(""))
                          .set("ok", true)
                          .set("none", Value())
                          .set("bytes", Value::binary(std::string("\0\x01\xff", 3)))
                          .set("list", Value::array())
                          .set("bad", std::string("a\xff", 2));
        value.set("list", [] {
            Value list = Value::array();
            list.push(1);
            list.push("é");
            return list;
        }());
        QCOMPARE(value.toJson(),
            std::string(R"({"name":"a \"quoted\"\\ line\n\u0001","n":-5,"big":18446744073709551615,"x":0.5,)"
                        R"("nan":null,"ok":true,"none":null,"bytes":"AAH/","list":[1,"é"],"bad":"a)"
                        "\xEF\xBF\xBD\"}"));
        QCOMPARE(Value::binary("ab").toJson(), std::string("\"YWI=\""));
        QCOMPARE(Value::binary("a").toJson(), std::string("\"YQ==\""));
    }

    // Every kind through toJson() and fromJson(), compact and indented: the
    // same value and kind back, but for binary, which JSON has not (base64
    // text), and non-finite doubles (null).
    void jsonRoundTrip_data()
    {
        QTest::addColumn<Value>("value");
        QTest::addColumn<Value>("back");
        const auto same = [](const char* name, const Value& value) { QTest::newRow(name) << value << value; };
        same("nil", Value());
        same("true", Value(true));
        same("false", Value(false));
        same("zero", Value(0));
        same("negative", Value(-33));
        same("int64 min", Value(std::numeric_limits<int64_t>::min()));
        same("int64 max", Value(std::numeric_limits<int64_t>::max()));
        same("uint64 above int64", Value(uint64_t(1) << 63));
        same("uint64 max", Value(std::numeric_limits<uint64_t>::max()));
        same("double", Value(0.1));
        same("negative double", Value(-1.5e300));
        same("integral double", Value(2.0));
        same("large integral double", Value(1e17));
        same("tiny double", Value(5e-324));
        same("empty string", Value(""));
        same("utf-8 string", Value("héllo, 世界 😀"));
        same("escapes", Value("a \"quoted\"\\ line\n\t\x01\x7f/"));
        same("empty array", Value::array());
        same("empty map", Value::map());
        Value mixed = Value::array();
        mixed.push(1);
        mixed.push("two");
        mixed.push(Value::map().set("three", 3.0).set("four", Value()));
        mixed.push(false);
        same("mixed array", mixed);
        same("nested map",
            Value::map()
                .set("project", "tiny-shakespeare")
                .set("steps", uint64_t(123456789012))
                .set("loss", Value::array())
                .set("gpu", Value::map().set("vram_bytes", int64_t(8) << 30)));
        same("depth 8", nestedArrays(8));
        QTest::newRow("binary") << Value::binary(std::string("\0\x01\xff", 3)) << Value("AAH/");
        QTest::newRow("infinity") << Value(std::numeric_limits<double>::infinity()) << Value();
    }

    void jsonRoundTrip()
    {
        QFETCH(Value, value);
        QFETCH(Value, back);
        for (const int indent : {-1, 2}) {
            auto parsed = Value::fromJson(value.toJson(indent));
            QVERIFY2(parsed.ok(), parsed.ok() ? "" : parsed.error().message.c_str());
            QCOMPARE(*parsed, back);
            QCOMPARE(parsed->kind(), back.kind());
        }
    }

    void fromJsonReads()
    {
        // Keys keep the text's order; whitespace around the value is fine.
        const auto map = Value::fromJson(" \n{\"b\": 1, \"a\": [true, null], \"c\": {}}\t");
        QVERIFY(map.ok());
        QCOMPARE(map->entries()[0].first, std::string("b"));
        QCOMPARE(map->entries()[1].first, std::string("a"));
        QCOMPARE((*map)["a"].at(0), Value(true));
        // Integers have one form; a '.' or an exponent makes a double, and
        // so does an integer beyond uint64.
        QCOMPARE(Value::fromJson("5")->kind(), Value::Kind::Int);
        QCOMPARE(Value::fromJson("-0")->kind(), Value::Kind::Int);
        QCOMPARE(Value::fromJson("9223372036854775807")->kind(), Value::Kind::Int);
        QCOMPARE(Value::fromJson("9223372036854775808")->kind(), Value::Kind::UInt);
        QCOMPARE(*Value::fromJson("18446744073709551615"), Value(std::numeric_limits<uint64_t>::max()));
        QCOMPARE(*Value::fromJson("18446744073709551616"), Value(18446744073709551616.0));
        QCOMPARE(*Value::fromJson("1e2"), Value(100.0));
        QCOMPARE(*Value::fromJson("5.0"), Value(5.0));
        // Escapes, surrogate pairs included, become UTF-8.
        QCOMPARE(*Value::fromJson(R"("\u00e9\ud83d\ude00\n")"), Value("é😀\n"));
    }

    void fromJsonRefuses_data()
    {
        QTest::addColumn<QByteArray>("text");
        QTest::addColumn<QString>("code");
        QTest::addColumn<QString>("message"); // a part of the error's message
        const auto malformed = QStringLiteral("malformed");
        const auto tooLarge = QStringLiteral("too_large");
        QTest::newRow("empty") << QByteArray() << malformed << QStringLiteral("line 1, column 1");
        QTest::newRow("truncated") << QByteArray(R"({"a": [1, 2)") << malformed
                                   << QStringLiteral("line 1, column 12: syntax error");
        QTest::newRow("on line 2") << QByteArray("{\n  \"a\" 1}") << malformed << QStringLiteral("line 2, column 7");
        QTest::newRow("trailing text") << QByteArray("{} {}") << malformed << QStringLiteral("expected end of input");
        QTest::newRow("single quotes") << QByteArray("{'a': 1}") << malformed << QStringLiteral("parse error");
        QTest::newRow("comment") << QByteArray("// hi\n1") << malformed << QStringLiteral("parse error");
        QTest::newRow("NaN") << QByteArray("NaN") << malformed << QStringLiteral("parse error");
        QTest::newRow("number overflow") << QByteArray("1e400") << malformed << QStringLiteral("number overflow");
        QTest::newRow("invalid utf-8") << QByteArray("\"a\xff\"") << malformed << QStringLiteral("UTF-8");
        QTest::newRow("long bad string") << QByteArray("\"") + QByteArray(100000, 'x') + QByteArray("\xff\"")
                                         << malformed << QStringLiteral("UTF-8");
        QTest::newRow("lone surrogate") << QByteArray(R"("\ud800")") << malformed << QStringLiteral("surrogate");
        QTest::newRow("control character") << QByteArray("\"a\x01\"") << malformed << QStringLiteral("U+0001");
        QTest::newRow("duplicate key") << QByteArray(R"({"k": 1, "k": 2})") << malformed
                                       << QStringLiteral("duplicate map key \"k\"");
        // Nesting is refused as it is read, before it is built: the cap of
        // decode(), 8 levels.
        QTest::newRow("depth 9") << QByteArray::fromStdString(nestedArrays(9).toJson()) << tooLarge
                                 << QStringLiteral("nesting deeper than 8 levels");
        QTest::newRow("depth 500000") << QByteArray(500000, '[') + QByteArray(500000, ']') << tooLarge
                                      << QStringLiteral("nesting deeper than 8 levels");
        QTest::newRow("unclosed depth 1 MiB") << QByteArray(1 << 20, '[') << tooLarge << QStringLiteral("nesting");
        Value manyKeys = Value::map();
        for (int i = 0; i <= 4096; ++i)
            manyKeys.set("k" + std::to_string(i), i);
        QTest::newRow("4097 map entries")
            << QByteArray::fromStdString(manyKeys.toJson()) << tooLarge << QStringLiteral("a map of 4097 entries");
        Value manyItems = Value::array();
        for (int i = 0; i <= 65536; ++i)
            manyItems.push(0);
        QTest::newRow("65537 array items")
            << QByteArray::fromStdString(manyItems.toJson()) << tooLarge << QStringLiteral("an array of 65537 items");
        QTest::newRow("text over 1 MiB") << QByteArray((1 << 20) + 1, ' ') << tooLarge
                                         << QStringLiteral("1048577 bytes");
    }

    void fromJsonRefuses()
    {
        QFETCH(QByteArray, text);
        QFETCH(QString, code);
        QFETCH(QString, message);
        auto parsed = Value::fromJson(std::string_view(text.constData(), std::size_t(text.size())));
        QVERIFY(!parsed.ok());
        QCOMPARE(QString::fromStdString(parsed.error().code), code);
        QVERIFY2(QString::fromStdString(parsed.error().message).contains(message), parsed.error().message.c_str());
        // The message quotes the text but stays fit to send.
        QVERIFY(checkLimits(Value(parsed.error().message)).ok());
        QVERIFY(parsed.error().message.size() <= kMaxErrorMessageBytes);
    }
};

QTEST_GUILESS_MAIN(TestControlValue)
#include "tst_control_value.moc"
