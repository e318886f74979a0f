// crowdtrain-prepare end to end: Tiny Shakespeare char-level and GPT-2 data
// folders, tokenize/detokenize against the library, and bad input leaving
// nothing behind.
#include "engine/data_set.h"
#include "engine/tokenizer.h"

#include <nlohmann/json.hpp>

#include <QProcess>
#include <QTemporaryDir>
#include <QTest>

#include <fstream>

using namespace crowdtrain;
using namespace crowdtrain::engine;

namespace {

const std::filesystem::path kShared = CROWDTRAIN_SHARED_DATA_DIR;

struct Run {
    int exitCode;
    QByteArray out;
    QString err;
};

Run prepare(const QStringList& arguments, const QByteArray& input = {})
{
    QProcess process;
    process.start(QStringLiteral(CROWDTRAIN_BIN_DIR "/crowdtrain-prepare"), arguments);
    process.write(input);
    process.closeWriteChannel();
    if (!process.waitForFinished(120000))
        qFatal("crowdtrain-prepare did not finish");
    return {process.exitStatus() == QProcess::NormalExit ? process.exitCode() : -1, process.readAllStandardOutput(),
        QString::fromUtf8(process.readAllStandardError())};
}

QString q(const std::filesystem::path& path)
{
    return QString::fromStdString(path.string());
}

std::string readAll(const std::filesystem::path& file)
{
    std::ifstream in(file, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

void writeAll(const std::filesystem::path& file, std::string_view content)
{
    std::ofstream(file, std::ios::binary) << content;
}

std::vector<int32_t> tokensOf(const std::vector<TokenShard>& shards)
{
    std::vector<int32_t> ids;
    for (const TokenShard& shard : shards)
        ids.insert(ids.end(), shard.tokens(), shard.tokens() + shard.size());
    return ids;
}

QByteArray joined(const std::vector<int32_t>& ids)
{
    QByteArray text;
    for (const int32_t id : ids)
        text += (text.isEmpty() ? "" : " ") + QByteArray::number(id);
    return text + '\n';
}

std::vector<std::string> entriesOf(const std::filesystem::path& dir)
{
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(dir))
        names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
}

} // namespace

class TestPrepare : public QObject {
    Q_OBJECT

private:
    QTemporaryDir m_dir;
    std::filesystem::path m_root;

private slots:
    // The shared data beside the checkout (../shared/data) is an input of
    // these tests: without it they fail, naming what is missing.
    void initTestCase()
    {
        m_root = m_dir.path().toStdString();
        for (const auto& file :
            {kShared / "tinyshakespeare.txt", kShared / "gpt2" / "encoder.json", kShared / "gpt2" / "vocab.bpe"})
            QVERIFY2(std::filesystem::is_regular_file(file), qPrintable(QStringLiteral("missing input: ") + q(file)));
    }

    void shakespeareCharLevel()
    {
        const auto out = m_root / "char";
        const Run run = prepare({q(kShared / "tinyshakespeare.txt"), QStringLiteral("--out"), q(out),
            QStringLiteral("--tokenizer"), QStringLiteral("char")});
        QVERIFY2(run.exitCode == 0, qPrintable(run.err));
        QVERIFY2(run.out.contains("char, vocabulary 65"), run.out.constData());
        QVERIFY2(run.out.contains("1,115,394"), run.out.constData());
        QVERIFY2(run.err.contains(QStringLiteral("tokenizing: 100%")), qPrintable(run.err)); // lines when not a TTY

        auto dataSet = openDataSet(out);
        QVERIFY2(dataSet.ok(), dataSet.ok() ? "" : dataSet.error().message.c_str());
        QVERIFY(dataSet->tokenizerDir.has_value());
        // nanoGPT's split: the first int(0.9 n) tokens train, the rest validate.
        QCOMPARE(dataSet->trainTokens(), uint64_t(1003854));
        QCOMPARE(dataSet->valTokens(), uint64_t(111540));
        uint64_t shardBytes = 0;
        for (const auto* shards : {&dataSet->train, &dataSet->val}) {
            for (const TokenShard& shard : *shards)
                shardBytes += std::filesystem::file_size(shard.path()) - 1024;
        }
        QCOMPARE(shardBytes, uint64_t(2 * 1115394));

        auto tokenizer = loadTokenizer(*dataSet->tokenizerDir);
        QVERIFY(tokenizer.ok());
        QCOMPARE((*tokenizer)->vocabSize(), 65);
        const std::string text = readAll(kShared / "tinyshakespeare.txt");
        QVERIFY((*tokenizer)->decode(tokensOf(dataSet->train)) == text.substr(0, 1003854));
        QVERIFY((*tokenizer)->decode(tokensOf(dataSet->val)) == text.substr(1003854));

        const auto meta = nlohmann::json::parse(readAll(out / "meta.json"));
        QCOMPARE(meta.at("tokenizer").at("kind").get<std::string>(), std::string("char"));
        QCOMPARE(meta.at("tokenizer").at("vocab_size").get<int>(), 65);
        QCOMPARE(meta.at("tokens").at("total").get<uint64_t>(), uint64_t(1115394));
        QCOMPARE(meta.at("shards").at("train").at(0).at("file").get<std::string>(),
            std::string("tinyshakespeare_train_000000.bin"));
        QCOMPARE(meta.at("shards").at("val").at(0).at("tokens").get<uint64_t>(), uint64_t(111540));
    }

    void tokenizeMatchesTheLibrary_data()
    {
        QTest::addColumn<QString>("folder");
        QTest::addColumn<QByteArray>("text");
        QTest::newRow("char") << QStringLiteral("char")
                              << QByteArray("First Citizen:\nBefore we proceed any further, hear me speak.\n");
        QTest::newRow("gpt2") << QStringLiteral("gpt2") << QByteArray("Héllo wörld, it's 2026! 👋\n\n  indented");
    }

    void tokenizeMatchesTheLibrary()
    {
        QFETCH(QString, folder);
        QFETCH(QByteArray, text);
        const auto dir = folder == QStringLiteral("char") ? m_root / "char" / "tokenizer" : kShared / "gpt2";
        auto tokenizer = loadTokenizer(dir);
        QVERIFY(tokenizer.ok());
        const auto expected = (*tokenizer)->encode(text.toStdString());
        const Run run = prepare({QStringLiteral("tokenize"), QStringLiteral("--tokenizer-dir"), q(dir)}, text);
        QVERIFY2(run.exitCode == 0, qPrintable(run.err));
        QCOMPARE(run.out, joined(expected));
        const Run back = prepare({QStringLiteral("detokenize"), QStringLiteral("--tokenizer-dir"), q(dir)}, run.out);
        QVERIFY2(back.exitCode == 0, qPrintable(back.err));
        QCOMPARE(back.out, text);
    }

    void tokenizeRejectsWhatItCannotEncode()
    {
        const auto dir = m_root / "char" / "tokenizer";
        const Run unknown
            = prepare({QStringLiteral("tokenize"), QStringLiteral("--tokenizer-dir"), q(dir)}, "caf\xC3\xA9");
        QVERIFY(unknown.exitCode != 0);
        QVERIFY2(unknown.err.contains(QStringLiteral("U+00E9")), qPrintable(unknown.err));
        const Run badId = prepare({QStringLiteral("detokenize"), QStringLiteral("--tokenizer-dir"), q(dir)}, "1 2 65");
        QVERIFY(badId.exitCode != 0);
        QVERIFY2(badId.err.contains(QStringLiteral("'65'")), qPrintable(badId.err));
    }

    // --spec writes a project spec with the data's vocabulary, its data
    // path relative to the spec, and its name from the file's; never over
    // an existing file.
    void specForTheData()
    {
        const auto dir = m_root / "spec";
        std::filesystem::create_directories(dir);
        const auto spec = dir / "My Shakespeare.json";
        const Run run = prepare({q(kShared / "tinyshakespeare.txt"), QStringLiteral("--tokenizer"),
            QStringLiteral("char"), QStringLiteral("--out"), q(dir / "data"), QStringLiteral("--spec"), q(spec)});
        QVERIFY2(run.exitCode == 0, qPrintable(run.err));
        const auto json = nlohmann::json::parse(readAll(spec));
        QCOMPARE(json["name"].get<std::string>(), std::string("my-shakespeare"));
        QCOMPARE(json["model"]["vocab_size"].get<int>(), 65);
        QCOMPARE(json["data"].get<std::string>(), std::string("data"));
        const Run again = prepare({q(kShared / "tinyshakespeare.txt"), QStringLiteral("--tokenizer"),
            QStringLiteral("char"), QStringLiteral("--out"), q(dir / "data2"), QStringLiteral("--spec"), q(spec)});
        QCOMPARE(again.exitCode, 2);
        QVERIFY(again.err.contains(QStringLiteral("exists")));
        QVERIFY(!std::filesystem::exists(dir / "data2"));
    }

    void gpt2ShardsAndFolders()
    {
        const auto corpus = m_root / "corpus";
        std::filesystem::create_directories(corpus / "sub");
        // Every text file, whatever its name; hidden and binary ones skipped.
        writeAll(corpus / "b.txt", "Second file.");
        writeAll(corpus / "sub" / "c", "Third file, in a folder.");
        writeAll(corpus / ".hidden.txt", "a hidden file");
        std::filesystem::create_directories(corpus / ".git");
        writeAll(corpus / ".git" / "HEAD", "in a hidden folder");
        writeAll(corpus / "image.png", std::string("\x89PNG\r\n\x1a\n\0\0\0\rIHDR", 16));
        const auto out = m_root / "gpt2";
        const Run run = prepare({q(kShared / "tinyshakespeare.txt"), q(corpus), QStringLiteral("--out"), q(out),
            QStringLiteral("--gpt2-dir"), q(kShared / "gpt2"), QStringLiteral("--shard-tokens"),
            QStringLiteral("100000"), QStringLiteral("--name"), QStringLiteral("shakes")});
        QVERIFY2(run.exitCode == 0, qPrintable(run.err));
        QCOMPARE(entriesOf(out),
            (std::vector<std::string>{"meta.json", "shakes_train_000000.bin", "shakes_train_000001.bin",
                "shakes_train_000002.bin", "shakes_train_000003.bin", "shakes_val_000000.bin", "tokenizer"}));
        auto dataSet = openDataSet(out);
        QVERIFY(dataSet.ok());
        for (std::size_t i = 0; i + 1 < dataSet->train.size(); ++i)
            QCOMPARE(dataSet->train[i].size(), uint64_t(100000));

        // The stream is the files in order with <|endoftext|> between them.
        auto tokenizer = loadTokenizer(*dataSet->tokenizerDir);
        QVERIFY(tokenizer.ok());
        std::vector<int32_t> expected = (*tokenizer)->encode(readAll(kShared / "tinyshakespeare.txt"));
        for (const char* text : {"Second file.", "Third file, in a folder."}) {
            expected.push_back(50256);
            const auto ids = (*tokenizer)->encode(text);
            expected.insert(expected.end(), ids.begin(), ids.end());
        }
        std::vector<int32_t> stream = tokensOf(dataSet->train);
        const auto val = tokensOf(dataSet->val);
        stream.insert(stream.end(), val.begin(), val.end());
        QVERIFY(stream == expected);
        QCOMPARE(dataSet->trainTokens(), uint64_t(expected.size() * 9 / 10));
    }

    void badInputLeavesNothing_data()
    {
        QTest::addColumn<QString>("problem");
        QTest::addColumn<QString>("mentions");
        QTest::newRow("missing input") << QStringLiteral("missing") << QStringLiteral("nope.txt: no such file");
        QTest::newRow("not utf-8") << QStringLiteral("latin1")
                                   << QStringLiteral("latin1.txt: not UTF-8 at byte offset 3");
        QTest::newRow("unwritable output") << QStringLiteral("unwritable") << QStringLiteral("cannot create");
        QTest::newRow("output not empty") << QStringLiteral("nonempty") << QStringLiteral("not empty");
        QTest::newRow("bad fraction") << QStringLiteral("fraction") << QStringLiteral("[0, 1)");
        QTest::newRow("unknown tokenizer") << QStringLiteral("tokenizer") << QStringLiteral("unknown tokenizer 'bpe'");
        QTest::newRow("missing gpt2 files") << QStringLiteral("gpt2dir") << QStringLiteral("encoder.json");
        QTest::newRow("empty folder") << QStringLiteral("emptyfolder") << QStringLiteral("no text files");
    }

    void badInputLeavesNothing()
    {
        QFETCH(QString, problem);
        QFETCH(QString, mentions);
        QTemporaryDir dir;
        const std::filesystem::path root = dir.path().toStdString();
        writeAll(root / "good.txt", "plain text\n");
        writeAll(root / "latin1.txt", "caf\xE9s\xE9");
        writeAll(root / "afile", "x");
        std::filesystem::create_directories(root / "full");
        writeAll(root / "full" / "keep.txt", "keep");
        std::filesystem::create_directories(root / "empty");
        auto out = root / "out";
        QStringList arguments{q(root / "good.txt")};
        QString tokenizer = QStringLiteral("char");
        if (problem == QStringLiteral("missing"))
            arguments << q(root / "nope.txt");
        else if (problem == QStringLiteral("latin1"))
            arguments << q(root / "latin1.txt");
        else if (problem == QStringLiteral("unwritable"))
            out = root / "afile" / "out";
        else if (problem == QStringLiteral("nonempty"))
            out = root / "full";
        else if (problem == QStringLiteral("fraction"))
            arguments << QStringLiteral("--val-fraction") << QStringLiteral("1.5");
        else if (problem == QStringLiteral("tokenizer"))
            tokenizer = QStringLiteral("bpe");
        else if (problem == QStringLiteral("gpt2dir")) {
            arguments << QStringLiteral("--gpt2-dir") << q(root / "empty");
            tokenizer = QStringLiteral("gpt2");
        } else if (problem == QStringLiteral("emptyfolder"))
            arguments = QStringList{q(root / "empty")};
        const auto before = entriesOf(root);
        const Run run = prepare(
            arguments + QStringList{QStringLiteral("--out"), q(out), QStringLiteral("--tokenizer"), tokenizer});
        QVERIFY(run.exitCode != 0);
        QVERIFY2(run.err.contains(mentions), qPrintable(run.err));
        QCOMPARE(entriesOf(root), before); // no output folder, no staging folder
        QCOMPARE(entriesOf(root / "full"), std::vector<std::string>{"keep.txt"});
    }
};

QTEST_GUILESS_MAIN(TestPrepare)
#include "tst_prepare.moc"
