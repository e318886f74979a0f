// The safetensors reader and writer against the format's spec: round trips,
// the header layout byte by byte, golden files, and corrupted inputs.
#include "engine/safetensors.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QTest>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <memory>

using namespace crowdtrain;
using namespace crowdtrain::engine;

namespace {

std::string readBytes(const std::filesystem::path& file)
{
    std::ifstream in(file, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void writeBytes(const std::filesystem::path& file, const std::string& bytes)
{
    std::ofstream(file, std::ios::binary) << bytes;
}

std::string le64(std::uint64_t value)
{
    std::string bytes;
    for (int i = 0; i < 8; ++i)
        bytes.push_back(char((value >> (8 * i)) & 0xff));
    return bytes;
}

// A file from a header text and data, the length field as given.
std::string rawFile(const std::string& json, const std::string& data)
{
    return le64(json.size()) + json + data;
}

std::string bytesOf(const torch::Tensor& tensor)
{
    const torch::Tensor t = tensor.contiguous();
    return std::string(static_cast<const char*>(t.data_ptr()), t.nbytes());
}

torch::Tensor sample(torch::Dtype dtype, std::vector<std::int64_t> shape)
{
    if (dtype == torch::kBool)
        return torch::randint(0, 2, shape).to(torch::kBool);
    if (dtype == torch::kUInt8)
        return torch::randint(0, 256, shape).to(dtype);
    if (c10::isIntegralType(dtype, false))
        return torch::randint(-100, 100, shape).to(dtype);
    return torch::randn(shape, torch::kFloat64).to(dtype);
}

bool sameTensor(const torch::Tensor& a, const torch::Tensor& b)
{
    return a.scalar_type() == b.scalar_type() && a.sizes() == b.sizes() && bytesOf(a) == bytesOf(b);
}

} // namespace

class TestSafetensors : public QObject {
    Q_OBJECT

private slots:
    void init()
    {
        m_dir = std::make_unique<QTemporaryDir>();
        QVERIFY(m_dir->isValid());
    }

    void roundTrip_data()
    {
        QTest::addColumn<QString>("dtype");
        for (const char* name : {"F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "U8", "BOOL"})
            QTest::newRow(name) << QString::fromLatin1(name);
    }

    // Every dtype, with scalars, empty tensors and several ranks.
    void roundTrip()
    {
        QFETCH(QString, dtype);
        const auto torchDtype = safetensorsDtype(dtype.toStdString());
        QVERIFY(torchDtype.has_value());
        QCOMPARE(safetensorsDtypeName(*torchDtype).value(), dtype.toStdString());
        NamedTensors tensors;
        const std::vector<std::vector<std::int64_t>> shapes{{}, {0}, {3, 0}, {7}, {2, 3, 4}, {1, 1, 1, 5}};
        for (std::size_t i = 0; i < shapes.size(); ++i)
            tensors.emplace_back("t" + std::to_string(i), sample(*torchDtype, shapes[i]));
        const std::map<std::string, std::string> metadata{{"round", "12"}, {"note", "ünïcode ✓"}};
        const auto file = path("roundtrip.safetensors");
        QVERIFY(writeSafetensors(file, tensors, metadata).ok());

        auto read = readSafetensors(file);
        QVERIFY2(read.ok(), read.ok() ? "" : read.error().message.c_str());
        QCOMPARE(read->metadata, metadata);
        QCOMPARE(read->tensors.size(), tensors.size());
        for (std::size_t i = 0; i < tensors.size(); ++i) {
            QCOMPARE(read->tensors[i].first, tensors[i].first); // one dtype: name order
            QVERIFY2(sameTensor(read->tensors[i].second, tensors[i].second), tensors[i].first.c_str());
        }
    }

    // The header as the spec and the reference writer lay it out.
    void headerLayout()
    {
        NamedTensors tensors{
            {"zeta", sample(torch::kFloat32, {3})}, {"alpha", sample(torch::kInt8, {5})},
            {"mid", sample(torch::kFloat64, {2})}, {"beta", sample(torch::kFloat32, {2, 2})},
            {"flag", sample(torch::kBool, {3})}, {"half", sample(torch::kFloat16, {3})},
            {"i64", sample(torch::kInt64, {1})}, {"strided", sample(torch::kInt32, {3, 2}).t()}, // not contiguous
        };
        const auto file = path("layout.safetensors");
        QVERIFY(writeSafetensors(file, tensors, {{"b", "2"}, {"a", "1"}}).ok());
        const std::string bytes = readBytes(file);

        std::uint64_t headerBytes = 0;
        for (int i = 7; i >= 0; --i)
            headerBytes = (headerBytes << 8) | static_cast<unsigned char>(bytes[i]);
        QVERIFY(8 + headerBytes <= bytes.size());
        QCOMPARE((8 + headerBytes) % 8, std::uint64_t(0)); // the data buffer is 8-byte aligned
        const std::string json = bytes.substr(8, headerBytes);
        const std::size_t close = json.find_last_of('}');
        QCOMPARE(json.find_first_not_of(' ', close + 1), std::string::npos); // padded with spaces only
        QVERIFY(json.starts_with(R"({"__metadata__":{"a":"1","b":"2"},)")); // metadata first, sorted

        const QJsonObject header = QJsonDocument::fromJson(QByteArray::fromStdString(json)).object();
        QCOMPARE(header.size(), int(tensors.size()) + 1);
        // Data order: descending alignment (the reference's dtype order), then name.
        const std::vector<std::string> order{"i64", "mid", "beta", "zeta", "strided", "half", "alpha", "flag"};
        std::uint64_t expectedBegin = 0;
        std::size_t previousPosition = 0;
        const std::string buffer = bytes.substr(8 + headerBytes);
        for (const auto& name : order) {
            const QJsonObject entry = header.value(QString::fromStdString(name)).toObject();
            const auto original
                = std::find_if(tensors.begin(), tensors.end(), [&](auto& t) { return t.first == name; });
            const torch::Tensor& tensor = original->second;
            QCOMPARE(entry.value(QStringLiteral("dtype")).toString().toStdString(),
                safetensorsDtypeName(tensor.scalar_type()).value());
            QJsonArray shape;
            for (auto size : tensor.sizes())
                shape.append(qint64(size));
            QCOMPARE(entry.value(QStringLiteral("shape")).toArray(), shape);
            const QJsonArray offsets = entry.value(QStringLiteral("data_offsets")).toArray();
            const auto begin = std::uint64_t(offsets.at(0).toInteger());
            const auto end = std::uint64_t(offsets.at(1).toInteger());
            QCOMPARE(begin, expectedBegin); // contiguous from 0, in this order
            QCOMPARE(begin % std::uint64_t(tensor.element_size()), std::uint64_t(0)); // every tensor aligned
            QCOMPARE(buffer.substr(begin, end - begin), bytesOf(tensor)); // row-major, little-endian
            const std::size_t position = json.find("\"" + name + "\":{");
            QVERIFY(position > previousPosition); // header lists tensors in data order
            previousPosition = position;
            expectedBegin = end;
        }
        QCOMPARE(expectedBegin, buffer.size()); // no bytes after the last tensor
    }

    void golden_data()
    {
        QTest::addColumn<QByteArray>("expected");
        QTest::addColumn<int>("example");
        // The spec's own example: one F32 [1,2,3] tensor, header needing no padding.
        const std::string attn = R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
        std::string floats;
        for (float value : {0.0f, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f})
            floats += std::string(reinterpret_cast<const char*>(&value), 4);
        QTest::newRow("F32 tensor") << QByteArray::fromStdString(std::string("\x40\0\0\0\0\0\0\0", 8) + attn + floats)
                                    << 0;
        // No tensors, metadata only: 35 bytes of JSON padded to 40.
        QTest::newRow("metadata only") << QByteArray::fromStdString(
            std::string("\x28\0\0\0\0\0\0\0", 8) + R"({"__metadata__":{"framework":"pt"}})" + "     ")
                                       << 1;
        // I16 before BOOL; a scalar; 161 bytes of JSON padded to 168 (0xa8).
        const std::string mixed = R"({"b":{"dtype":"I16","shape":[2],"data_offsets":[0,4]},)"
                                  R"("a":{"dtype":"BOOL","shape":[2],"data_offsets":[4,6]},)"
                                  R"("s":{"dtype":"BOOL","shape":[],"data_offsets":[6,7]}})";
        QTest::newRow("mixed, padded") << QByteArray::fromStdString(
            std::string("\xa8\0\0\0\0\0\0\0", 8) + mixed + "       " + std::string("\x01\x00\xfe\xff\x01\x00\x01", 7))
                                       << 2;
    }

    // Bytes built by hand from the spec: we write exactly them and read them back.
    void golden()
    {
        QFETCH(QByteArray, expected);
        QFETCH(int, example);
        NamedTensors tensors;
        std::map<std::string, std::string> metadata;
        if (example == 0)
            tensors.emplace_back("attn.0", torch::arange(6, torch::kFloat32).reshape({1, 2, 3}));
        if (example == 1)
            metadata["framework"] = "pt";
        if (example == 2) {
            tensors.emplace_back("a", torch::tensor({true, false}));
            tensors.emplace_back("s", torch::tensor(true));
            tensors.emplace_back("b", torch::tensor({1, -2}, torch::kInt16));
        }
        auto serialized = serializeSafetensors(tensors, metadata);
        QVERIFY(serialized.ok());
        QCOMPARE(QByteArray::fromStdString(*serialized), expected);
        const auto file = path("golden.safetensors");
        QVERIFY(writeSafetensors(file, tensors, metadata).ok());
        QCOMPARE(QByteArray::fromStdString(readBytes(file)), expected);

        writeBytes(file, expected.toStdString());
        auto read = readSafetensors(file);
        QVERIFY(read.ok());
        QCOMPARE(read->metadata, metadata);
        QCOMPARE(read->tensors.size(), tensors.size());
        for (const auto& [name, tensor] : tensors) {
            auto it
                = std::find_if(read->tensors.begin(), read->tensors.end(), [&](auto& t) { return t.first == name; });
            QVERIFY(it != read->tensors.end());
            QVERIFY(sameTensor(it->second, tensor));
        }
    }

    void corrupted_data()
    {
        QTest::addColumn<QByteArray>("bytes");
        QTest::addColumn<QString>("code");
        QTest::addColumn<QString>("phrase");
        const auto row = [](const char* name, const std::string& bytes, const char* code, const char* phrase) {
            QTest::newRow(name) << QByteArray::fromStdString(bytes) << QString::fromLatin1(code)
                                << QString::fromUtf8(phrase);
        };
        const std::string eight(8, '\x11');
        const std::string pair = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
        row("shorter than the length field", std::string("\x05\0\0", 3), "safetensors_truncated", "shorter than");
        row("truncated buffer", rawFile(pair, eight.substr(0, 5)), "safetensors_truncated", "truncated");
        row("header length past EOF", le64(1000) + pair + eight, "safetensors_truncated", "past the end");
        row("header length over the limit", le64(std::uint64_t(1) << 40) + pair, "safetensors_header", "limit");
        row("bad JSON", rawFile(R"({"a":{"dtype":)", ""), "safetensors_json", "not valid JSON");
        row("invalid UTF-8", rawFile("{\"\xff\":1}", ""), "safetensors_json", "not valid JSON");
        row("header not an object", rawFile("[1,2]", ""), "safetensors_json", "not a JSON object");
        row("overlapping offsets",
            rawFile(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                    R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                eight + eight.substr(4)),
            "safetensors_offsets", "overlaps tensor 'a'");
        row("hole between tensors",
            rawFile(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                    R"("b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})",
                eight + eight),
            "safetensors_offsets", "bytes [8, 12) before tensor 'b'");
        row("bytes after the last tensor", rawFile(pair, eight + "xyz"), "safetensors_offsets",
            "after the last tensor");
        row("dtype/shape mismatch", rawFile(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight),
            "safetensors_shape", "needs 12 bytes");
        row("unknown dtype", rawFile(R"({"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", eight),
            "safetensors_dtype", "\"Q4\"");
        row("reversed offsets", rawFile(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[8,0]}})", eight),
            "safetensors_offsets", "[begin, end]");
        row("negative size", rawFile(R"({"a":{"dtype":"U8","shape":[-8],"data_offsets":[0,8]}})", eight),
            "safetensors_header", "not a list of sizes");
        row("shape overflow",
            rawFile(R"({"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", eight),
            "safetensors_shape", "overflows");
        row("missing field", rawFile(R"({"a":{"dtype":"U8","shape":[8]}})", eight), "safetensors_header",
            "data_offsets");
        row("metadata value not a string", rawFile(R"({"__metadata__":{"round":3}})", ""), "safetensors_header",
            "'round'");
        row("BOOL byte other than 0/1",
            rawFile(R"({"a":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})", "\x01\x02"), "safetensors_bool",
            "other than 0 and 1");
    }

    // Each corruption is reported with its own code, the file and the problem.
    void corrupted()
    {
        QFETCH(QByteArray, bytes);
        QFETCH(QString, code);
        QFETCH(QString, phrase);
        const auto file = path("corrupt.safetensors");
        writeBytes(file, bytes.toStdString());
        auto read = readSafetensors(file);
        QVERIFY(!read.ok());
        QCOMPARE(QString::fromStdString(read.error().code), code);
        const std::string& message = read.error().message;
        QVERIFY2(message.find(file.string()) != std::string::npos, message.c_str());
        QVERIFY2(message.find(phrase.toStdString()) != std::string::npos, message.c_str());
    }

    // The reference reader sorts by offsets: any header order is valid.
    void readsAnyHeaderOrder()
    {
        const auto file = path("reordered.safetensors");
        writeBytes(file,
            rawFile(R"({"late":{"dtype":"U8","shape":[2],"data_offsets":[2,4]},)"
                    R"("__metadata__":{"k":"v"},"early":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}  )",
                "\x01\x02\x03\x04"));
        auto read = readSafetensors(file);
        QVERIFY(read.ok());
        QCOMPARE(read->tensors.size(), std::size_t(2));
        QCOMPARE(read->tensors[0].first, std::string("early")); // data order
        QCOMPARE(read->tensors[1].second[1].item<int>(), 4);
        QCOMPARE(read->metadata.at("k"), std::string("v"));
    }

    void missingFileIsAnError()
    {
        auto read = readSafetensors(path("absent.safetensors"));
        QVERIFY(!read.ok());
        QCOMPARE(read.error().code, std::string("io_error"));
    }

    void writerRejects_data()
    {
        QTest::addColumn<QString>("first");
        QTest::addColumn<QString>("second");
        QTest::addColumn<QString>("kind");
        QTest::newRow("duplicate name") << QStringLiteral("w") << QStringLiteral("w") << QStringLiteral("dense");
        QTest::newRow("reserved name") << QStringLiteral("w") << QStringLiteral("__metadata__")
                                       << QStringLiteral("dense");
        QTest::newRow("empty name") << QStringLiteral("w") << QString() << QStringLiteral("dense");
        QTest::newRow("unsupported dtype") << QStringLiteral("w") << QStringLiteral("c") << QStringLiteral("complex");
        QTest::newRow("sparse tensor") << QStringLiteral("w") << QStringLiteral("s") << QStringLiteral("sparse");
        QTest::newRow("undefined tensor") << QStringLiteral("w") << QStringLiteral("u") << QStringLiteral("undefined");
    }

    // Nothing is written, not even a temporary file.
    void writerRejects()
    {
        QFETCH(QString, first);
        QFETCH(QString, second);
        QFETCH(QString, kind);
        torch::Tensor other = torch::zeros({2});
        if (kind == QStringLiteral("complex"))
            other = torch::zeros({2}, torch::kComplexFloat);
        if (kind == QStringLiteral("sparse"))
            other = torch::eye(2).to_sparse();
        if (kind == QStringLiteral("undefined"))
            other = torch::Tensor();
        const NamedTensors tensors{{first.toStdString(), torch::zeros({2})}, {second.toStdString(), other}};
        const auto file = path("rejected.safetensors");
        Status written = writeSafetensors(file, tensors);
        QVERIFY(!written.ok());
        QCOMPARE(written.error().code, std::string("bad_tensor"));
        QVERIFY2(written.error().message.find(file.string()) != std::string::npos, written.error().message.c_str());
        QCOMPARE(fileCount(), std::ptrdiff_t(0));
    }

    // Rewriting replaces the file whole and leaves no temporary files behind.
    void writeReplacesAtomically()
    {
        const auto file = path("model.safetensors");
        QVERIFY(writeSafetensors(file, {{"a", torch::ones({1000})}}).ok());
        QVERIFY(writeSafetensors(file, {{"b", torch::zeros({3})}}, {{"v", "2"}}).ok());
        auto read = readSafetensors(file);
        QVERIFY(read.ok());
        QCOMPARE(read->tensors.size(), std::size_t(1));
        QCOMPARE(read->tensors[0].first, std::string("b"));
        QCOMPARE(fileCount(), std::ptrdiff_t(1));

        Status failed = writeSafetensors(path("no/such/folder/x.safetensors"), {{"a", torch::ones({1})}});
        QVERIFY(!failed.ok());
        QCOMPARE(failed.error().code, std::string("io_error"));
    }

private:
    std::filesystem::path path(const char* name) const
    {
        return std::filesystem::path(m_dir->path().toStdString()) / name;
    }
    std::ptrdiff_t fileCount() const
    {
        return std::distance(std::filesystem::directory_iterator(m_dir->path().toStdString()), {});
    }

    std::unique_ptr<QTemporaryDir> m_dir; // fresh for every test function and row
};

QTEST_GUILESS_MAIN(TestSafetensors)
#include "tst_safetensors.moc"
