// Tokenizers: GPT-2 BPE parity with the reference ids (tests/data/
// bpe_reference.json, made by make_bpe_reference.js) over a broad corpus and
// all of Tiny Shakespeare, round trips, the pre-tokenizer's splits, the
// Unicode table, the char tokenizer, saving, loading and bad files.
#include "core/utf8.h"
#include "engine/bpe_tokenizer.h"
#include "engine/char_tokenizer.h"
#include "engine/corpus.h"
#include "engine/gpt2_pretokenizer.h"
#include "engine/unicode_classes.h"

#include <nlohmann/json.hpp>

#include <QTemporaryDir>
#include <QTest>

#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

using namespace crowdtrain;
using namespace crowdtrain::engine;

namespace {

const std::filesystem::path kShared = CROWDTRAIN_SHARED_DATA_DIR;
const std::filesystem::path kReference = CROWDTRAIN_SOURCE_DIR "/tests/data/bpe_reference.json";

std::string readAll(const std::filesystem::path& file)
{
    std::ifstream in(file, std::ios::binary);
    std::ostringstream content;
    content << in.rdbuf();
    return content.str();
}

void writeAll(const std::filesystem::path& file, std::string_view content)
{
    std::ofstream(file, std::ios::binary) << content;
}

uint64_t fnv1a(std::string_view bytes)
{
    uint64_t hash = 0xcbf29ce484222325ull;
    for (const char byte : bytes)
        hash = (hash ^ static_cast<unsigned char>(byte)) * 0x100000001b3ull;
    return hash;
}

uint64_t idsHash(const std::vector<int32_t>& ids)
{
    std::string bytes(ids.size() * 4, '\0');
    std::memcpy(bytes.data(), ids.data(), bytes.size()); // little-endian, like the generator
    return fnv1a(bytes);
}

std::string hex(uint64_t value)
{
    char buffer[17];
    std::snprintf(buffer, sizeof buffer, "%016llx", static_cast<unsigned long long>(value));
    return buffer;
}

std::string joined(const std::vector<int32_t>& ids)
{
    std::string text;
    for (const int32_t id : ids)
        text += (text.empty() ? "" : " ") + std::to_string(id);
    return text;
}

QByteArray bytes(std::string_view text)
{
    return QByteArray(text.data(), static_cast<qsizetype>(text.size()));
}

std::string str(const QByteArray& bytes)
{
    return bytes.toStdString();
}

} // namespace

class TestTokenizer : public QObject {
    Q_OBJECT

private:
    std::unique_ptr<Tokenizer> m_gpt2;
    nlohmann::json m_reference;
    std::string m_shakespeare;

private slots:
    // The shared data beside the checkout (../shared/data) is an input of
    // these tests: without it they fail, naming what is missing.
    void initTestCase()
    {
        for (const auto& file : {kShared / "gpt2" / "encoder.json", kShared / "gpt2" / "vocab.bpe",
                 kShared / "tinyshakespeare.txt", kReference})
            QVERIFY2(std::filesystem::is_regular_file(file), ("missing input: " + file.string()).c_str());
        auto tokenizer = loadTokenizer(kShared / "gpt2");
        QVERIFY2(tokenizer.ok(), tokenizer.ok() ? "" : tokenizer.error().message.c_str());
        m_gpt2 = std::move(*tokenizer);
        m_reference = nlohmann::json::parse(readAll(kReference));
        m_shakespeare = readAll(kShared / "tinyshakespeare.txt");
        QCOMPARE(m_shakespeare.size(), std::size_t(1115394));
    }

    void unicodeTable()
    {
        for (char32_t cp = 0; cp < 128; ++cp)
            QCOMPARE(detail::searchCharClass(cp), detail::kAsciiClasses[cp]);
        QCOMPARE(charClass(U'\u00e9'), CharClass::Letter);
        QCOMPARE(charClass(U'\u4e2d'), CharClass::Letter);
        QCOMPARE(charClass(U'\u0663'), CharClass::Number);
        QCOMPARE(charClass(U'\u00bd'), CharClass::Number);
        QCOMPARE(charClass(U'\u3000'), CharClass::Space);
        QCOMPARE(charClass(U'\u0085'), CharClass::Space); // Python's \s has NEL, JavaScript's does not
        QCOMPARE(charClass(U'\ufeff'), CharClass::Other); // JavaScript's \s has the BOM, Python's does not
        QCOMPARE(charClass(U'\u001f'), CharClass::Other); // in Python's `re` \s, not in `regex`'s
        QCOMPARE(charClass(U'\u0301'), CharClass::Other);
        QCOMPARE(charClass(U'\U0001F600'), CharClass::Other);
        QCOMPARE(charClass(U'\U0010FFFF'), CharClass::Other);
    }

    void utf8Decoding_data()
    {
        QTest::addColumn<QByteArray>("text");
        QTest::addColumn<uint>("codePoint");
        QTest::addColumn<uint>("length");
        QTest::addColumn<bool>("valid");
        QTest::newRow("ascii") << QByteArray("A") << 0x41u << 1u << true;
        QTest::newRow("two bytes") << QByteArray("\xC3\xA9") << 0xE9u << 2u << true;
        QTest::newRow("three bytes") << QByteArray("\xE2\x82\xAC") << 0x20ACu << 3u << true;
        QTest::newRow("four bytes") << QByteArray("\xF0\x9F\x98\x80") << 0x1F600u << 4u << true;
        QTest::newRow("max") << QByteArray("\xF4\x8F\xBF\xBF") << 0x10FFFFu << 4u << true;
        QTest::newRow("overlong") << QByteArray("\xC0\x80") << 0xC0u << 1u << false;
        QTest::newRow("overlong three") << QByteArray("\xE0\x80\x80") << 0xE0u << 1u << false;
        QTest::newRow("surrogate") << QByteArray("\xED\xA0\x80") << 0xEDu << 1u << false;
        QTest::newRow("above max") << QByteArray("\xF4\x90\x80\x80") << 0xF4u << 1u << false;
        QTest::newRow("truncated") << QByteArray("\xE2\x82") << 0xE2u << 1u << false;
        QTest::newRow("continuation") << QByteArray("\x80") << 0x80u << 1u << false;
        QTest::newRow("bad second byte") << QByteArray("\xC3\x28") << 0xC3u << 1u << false;
    }

    void utf8Decoding()
    {
        QFETCH(QByteArray, text);
        QFETCH(uint, codePoint);
        QFETCH(uint, length);
        QFETCH(bool, valid);
        const core::Utf8Char c = core::decodeUtf8(str(text), 0);
        QCOMPARE(uint(c.codePoint), codePoint);
        QCOMPARE(c.length, length);
        QCOMPARE(c.valid, valid);
        QCOMPARE(core::findInvalidUtf8(str(text)).has_value(), !valid);
        QCOMPARE(core::isValidUtf8(str(text)), valid);
    }

    void completeUtf8Length_data()
    {
        QTest::addColumn<QByteArray>("bytes");
        QTest::addColumn<int>("complete");
        QTest::newRow("empty") << QByteArray() << 0;
        QTest::newRow("ascii") << QByteArray("abc") << 3;
        QTest::newRow("lead alone") << QByteArray("a\xC3") << 1;
        QTest::newRow("two bytes") << QByteArray("a\xC3\xA9") << 3;
        QTest::newRow("three of three missing one") << QByteArray("\xE2\x82") << 0;
        QTest::newRow("three bytes") << QByteArray("\xE2\x82\xAC") << 3;
        QTest::newRow("four missing one") << QByteArray("x\xF0\x9F\x98") << 1;
        QTest::newRow("four bytes") << QByteArray("\xF0\x9F\x98\x80") << 4;
        QTest::newRow("four then lead") << QByteArray("\xF0\x9F\x98\x80\xF0") << 4;
        QTest::newRow("overlong cannot complete") << QByteArray("\xE0\x80") << 2;
        QTest::newRow("above max cannot complete") << QByteArray("\xF4\x90") << 2;
        QTest::newRow("surrogate cannot complete") << QByteArray("\xED\xA0") << 2;
        QTest::newRow("last before surrogates") << QByteArray("\xED\x9F") << 0;
        QTest::newRow("invalid lead") << QByteArray("\xC0") << 1;
        QTest::newRow("invalid byte") << QByteArray("\xFF") << 1;
        QTest::newRow("continuations only") << QByteArray("\x80\x80\x80") << 3;
        QTest::newRow("broken then lead") << QByteArray("\xC3\x28\xE2") << 2;
        QTest::newRow("ascii after lead") << QByteArray("\xE2\x82"
                                                        "a")
                                          << 3;
    }

    void completeUtf8Length()
    {
        QFETCH(QByteArray, bytes);
        QFETCH(int, complete);
        QCOMPARE(int(core::completeUtf8Length(str(bytes))), complete);
    }

    void utf8StreamKeepsCharactersWhole()
    {
        std::string text = "Caf\xC3\xA9 \xF0\x9F\x98\x80\xF0\x9F\x8E\x89 \xE4\xB8\xAD\xE6\x96\x87 "
                           "\xE2\x80\x94 na\xC3\xAFve \xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x9A\x80";
        std::mt19937 random(7);
        for (int i = 0; i < 400; ++i)
            core::appendUtf8(text, std::uniform_int_distribution<char32_t>(0x1F300, 0x1FAFF)(random));
        const auto ids = m_gpt2->encode(text);
        core::Utf8Stream stream;
        std::string joined;
        int heldBack = 0;
        for (const int32_t id : ids) {
            const std::string bytes = m_gpt2->decode(std::span<const int32_t>(&id, 1));
            const std::string piece = stream.push(bytes);
            QVERIFY2(!core::findInvalidUtf8(piece), "a piece ends inside a character");
            heldBack += piece.size() < bytes.size();
            joined += piece;
        }
        QVERIFY(heldBack > 0); // GPT-2 does cut characters between tokens here
        QCOMPARE(stream.finish(), std::string());
        QCOMPARE(joined, text);

        // Bytes that are not UTF-8 pass through unchanged, and an incomplete
        // character at the end comes out of finish().
        core::Utf8Stream raw;
        QCOMPARE(raw.push("\xFF\x80 ok \xE2"), std::string("\xFF\x80 ok "));
        QCOMPARE(raw.push("\x82"), std::string());
        QCOMPARE(raw.push("\x28"), std::string("\xE2\x82\x28"));
        QCOMPARE(raw.push("\xF0\x9F"), std::string());
        QCOMPARE(raw.finish(), std::string("\xF0\x9F"));
        QCOMPARE(raw.finish(), std::string());
    }

    void pieces_data()
    {
        QTest::addColumn<QByteArray>("text");
        QTest::addColumn<QByteArray>("expected"); // pieces joined by '|'
        QTest::newRow("words") << QByteArray("Hello world") << QByteArray("Hello| world");
        QTest::newRow("space run before word") << QByteArray("a   b") << QByteArray("a|  | b");
        QTest::newRow("newlines") << QByteArray("a\n\n\nb") << QByteArray("a|\n\n|\n|b");
        QTest::newRow("trailing spaces") << QByteArray("hi  ") << QByteArray("hi|  ");
        QTest::newRow("tab before word") << QByteArray("a\tb") << QByteArray("a|\t|b");
        QTest::newRow("spaces then tab") << QByteArray("a  \tb") << QByteArray("a|  |\t|b");
        QTest::newRow("contraction") << QByteArray("it's") << QByteArray("it|'s");
        QTest::newRow("all contractions") << QByteArray("'s't're've'm'll'd") << QByteArray("'s|'t|'re|'ve|'m|'ll|'d");
        QTest::newRow("upper case is no contraction") << QByteArray("IT'S") << QByteArray("IT|'|S");
        QTest::newRow("quote run") << QByteArray("''s") << QByteArray("''|s");
        QTest::newRow("space quote") << QByteArray(" 's") << QByteArray(" '|s");
        QTest::newRow("numbers") << QByteArray("abc123 456") << QByteArray("abc|123| 456");
        QTest::newRow("punctuation") << QByteArray("Hi!!! ...") << QByteArray("Hi|!!!| ...");
        QTest::newRow("ideographic space")
            << QByteArray("\xE3\x80\x80\xE3\x80\x80x") << QByteArray("\xE3\x80\x80|\xE3\x80\x80|x");
        QTest::newRow("invalid bytes") << QByteArray("a\xFF\xFE b") << QByteArray("a|\xFF\xFE| b");
        QTest::newRow("empty") << QByteArray() << QByteArray();
    }

    void pieces()
    {
        QFETCH(QByteArray, text);
        QFETCH(QByteArray, expected);
        const std::string input = str(text);
        Gpt2PieceSplitter splitter(input);
        std::string result;
        while (const auto piece = splitter.next())
            result += (result.empty() ? "" : "|") + std::string(*piece);
        QCOMPARE(bytes(result), expected);
    }

    void bpeMatchesReference()
    {
        const auto& cases = m_reference.at("cases");
        QVERIFY(cases.size() > 10000);
        int failures = 0;
        for (const auto& row : cases) {
            const std::string text = row.at(0).get<std::string>();
            const auto expected = row.at(1).get<std::vector<int32_t>>();
            const auto ids = m_gpt2->encode(text);
            if (ids != expected && ++failures <= 5)
                qWarning("mismatch for %s: got [%s], expected [%s]", nlohmann::json(text).dump().c_str(),
                    joined(ids).c_str(), joined(expected).c_str());
        }
        QCOMPARE(failures, 0);
    }

    void bpeMatchesReferenceOnShakespeareChunks()
    {
        const auto& reference = m_reference.at("shakespeare");
        QCOMPARE(reference.at("fnv1a").get<std::string>(), hex(fnv1a(m_shakespeare)));
        std::size_t covered = 0;
        for (const auto& chunk : reference.at("chunks")) {
            const auto offset = chunk.at("offset").get<std::size_t>();
            const std::string_view text = std::string_view(m_shakespeare).substr(offset, chunk.at("length"));
            QCOMPARE(hex(fnv1a(text)), chunk.at("fnv1a").get<std::string>());
            QCOMPARE(joined(m_gpt2->encode(text)), chunk.at("ids").get<std::string>());
            covered += text.size();
        }
        QCOMPARE(covered, m_shakespeare.size());
    }

    void bpeMatchesReferenceOnShakespeareLines()
    {
        std::vector<std::string_view> lines;
        for (std::size_t start = 0; start < m_shakespeare.size();) {
            const std::size_t end = std::min(m_shakespeare.find('\n', start), m_shakespeare.size() - 1) + 1;
            lines.push_back(std::string_view(m_shakespeare).substr(start, end - start));
            start = end;
        }
        QCOMPARE(lines.size(), std::size_t(40000));
        for (const auto& group : m_reference.at("shakespeare").at("line_groups")) {
            const auto first = group.at("firstLine").get<std::size_t>();
            std::vector<int32_t> ids;
            for (std::size_t i = first; i < first + group.at("lineCount").get<std::size_t>(); ++i) {
                const auto lineIds = m_gpt2->encode(lines[i]);
                ids.insert(ids.end(), lineIds.begin(), lineIds.end());
            }
            QCOMPARE(ids.size(), group.at("tokens").get<std::size_t>());
            QCOMPARE(hex(idsHash(ids)), group.at("idsFnv1a").get<std::string>());
        }
    }

    // Chunks cut at safe points tokenize like the whole file; the whole file
    // gives the 338,025 tokens GPT-2's own encoder.py gives.
    void bpeChunkedEqualsWhole()
    {
        const auto whole = m_gpt2->encode(m_shakespeare);
        QCOMPARE(whole.size(), std::size_t(338025));
        std::vector<int32_t> chunked;
        int chunks = 0;
        const Status status = forEachChunk(kShared / "tinyshakespeare.txt", 777, [&](std::string_view chunk) {
            const auto ids = m_gpt2->encode(chunk);
            chunked.insert(chunked.end(), ids.begin(), ids.end());
            ++chunks;
            return Status::success();
        });
        QVERIFY(status.ok());
        QVERIFY(chunks > 1000);
        QVERIFY(chunked == whole);
        QCOMPARE(m_gpt2->decode(whole), m_shakespeare);
    }

    void bpeRoundTrips()
    {
        for (const auto& row : m_reference.at("cases")) {
            const std::string text = row.at(0).get<std::string>();
            QCOMPARE(m_gpt2->decode(m_gpt2->encode(text)), text);
        }
        std::mt19937 random(42);
        const std::vector<std::pair<char32_t, char32_t>> ranges
            = {{0x20, 0x7E}, {0x0, 0x20}, {0xA0, 0x2FF}, {0x300, 0x36F}, {0x370, 0x10FF}, {0x2000, 0x206F},
                {0x3000, 0x9FFF}, {0xAC00, 0xD7A3}, {0xE000, 0xFFFF}, {0x10000, 0x10FFFF}};
        for (int i = 0; i < 3000; ++i) {
            std::string text;
            const int length = std::uniform_int_distribution<int>(0, 60)(random);
            for (int j = 0; j < length; ++j) {
                const auto& [first, last] = ranges[random() % ranges.size()];
                char32_t cp = std::uniform_int_distribution<char32_t>(first, last)(random);
                if (cp >= 0xD800 && cp <= 0xDFFF)
                    cp = U' ';
                core::appendUtf8(text, cp);
            }
            QCOMPARE(m_gpt2->decode(m_gpt2->encode(text)), text);
        }
        // Any bytes round-trip too, since BPE works on bytes.
        for (int i = 0; i < 1000; ++i) {
            std::string text(std::uniform_int_distribution<std::size_t>(0, 40)(random), '\0');
            for (char& byte : text)
                byte = static_cast<char>(random());
            QCOMPARE(m_gpt2->decode(m_gpt2->encode(text)), text);
        }
    }

    void bpeProperties()
    {
        QCOMPARE(m_gpt2->vocabSize(), 50257);
        QCOMPARE(m_gpt2->kind(), std::string("gpt2-bpe"));
        QCOMPARE(m_gpt2->endOfText(), std::optional<int32_t>(50256));
        QCOMPARE(m_gpt2->decode(std::vector<int32_t>{50256}), std::string("<|endoftext|>"));
        QCOMPARE(m_gpt2->decode(std::vector<int32_t>{15496, -1, 50257, 995}),
            "Hello" + std::string(kReplacementCharacter) + std::string(kReplacementCharacter) + " world");
        const auto strict = m_gpt2->tryEncode("any \xFF bytes");
        QVERIFY(strict.ok());
        QCOMPARE(*strict, m_gpt2->encode("any \xFF bytes"));
    }

    void bpeConcurrentEncode()
    {
        const std::string_view text = std::string_view(m_shakespeare).substr(0, 200000);
        const auto expected = m_gpt2->encode(text);
        std::vector<std::vector<int32_t>> results(4);
        std::vector<std::thread> threads;
        for (auto& result : results)
            threads.emplace_back([&] { result = m_gpt2->encode(text); });
        for (auto& thread : threads)
            thread.join();
        for (const auto& result : results)
            QVERIFY(result == expected);
    }

    void bpeSaveAndLoad()
    {
        QTemporaryDir dir;
        const std::filesystem::path out = dir.path().toStdString() + "/tok";
        QVERIFY(m_gpt2->save(out).ok());
        // vocab.bpe comes out byte for byte; encoder.json as the same mapping.
        QCOMPARE(readAll(out / "vocab.bpe"), readAll(kShared / "gpt2" / "vocab.bpe"));
        QVERIFY(nlohmann::json::parse(readAll(out / "encoder.json"))
            == nlohmann::json::parse(readAll(kShared / "gpt2" / "encoder.json")));
        auto loaded = loadTokenizer(out);
        QVERIFY(loaded.ok());
        QCOMPARE((*loaded)->kind(), std::string("gpt2-bpe"));
        const std::string_view sample = std::string_view(m_shakespeare).substr(0, 20000);
        QVERIFY((*loaded)->encode(sample) == m_gpt2->encode(sample));
    }

    void badBpeFiles_data()
    {
        QTest::addColumn<QByteArray>("encoder"); // "-" for no file; "@" for the real one, "@N" for its first N bytes
        QTest::addColumn<QByteArray>("merges");
        QTest::addColumn<QString>("mentions");
        QTest::newRow("no encoder.json") << QByteArray("-") << QByteArray("@") << QStringLiteral("encoder.json");
        QTest::newRow("no vocab.bpe") << QByteArray("@") << QByteArray("-") << QStringLiteral("vocab.bpe");
        QTest::newRow("truncated encoder.json")
            << QByteArray("@5000") << QByteArray("@") << QStringLiteral("encoder.json: not valid JSON");
        QTest::newRow("truncated vocab.bpe") << QByteArray("@") << QByteArray("@200000") << QStringLiteral("vocab.bpe");
        QTest::newRow("not an object") << QByteArray("[1, 2]") << QByteArray("@") << QStringLiteral("encoder.json");
        QTest::newRow("id not a number") << QByteArray("{\"a\": \"x\"}") << QByteArray("@")
                                         << QStringLiteral("encoder.json");
        QTest::newRow("bad merge line") << QByteArray("@") << QByteArray("#version: 0.2\nĠ t x\n")
                                        << QStringLiteral("vocab.bpe:2");
    }

    void badBpeFiles()
    {
        QFETCH(QByteArray, encoder);
        QFETCH(QByteArray, merges);
        QFETCH(QString, mentions);
        QTemporaryDir dir;
        const std::filesystem::path out = dir.path().toStdString();
        const auto place = [&](const QByteArray& spec, const char* name) {
            if (spec == "-")
                return;
            std::string content = spec.startsWith('@') ? readAll(kShared / "gpt2" / name) : str(spec);
            if (spec.startsWith('@') && spec.size() > 1)
                content.resize(spec.mid(1).toULongLong());
            writeAll(out / name, content);
        };
        place(encoder, "encoder.json");
        place(merges, "vocab.bpe");
        auto tokenizer = loadTokenizer(out);
        QVERIFY(!tokenizer.ok());
        const QString message = QString::fromStdString(tokenizer.error().message);
        QVERIFY2(message.contains(mentions), qPrintable(message));
    }

    void charTokenizerOnShakespeare()
    {
        auto tokenizer = CharTokenizer::fromText(m_shakespeare);
        QVERIFY(tokenizer.ok());
        const CharTokenizer& chars = **tokenizer;
        QCOMPARE(chars.vocabSize(), 65); // nanoGPT's shakespeare_char
        QCOMPARE(chars.decode(std::vector<int32_t>{0, 1, 2}), std::string("\n !"));
        QCOMPARE(chars.decode(std::vector<int32_t>{0, 65, -1}),
            "\n" + std::string(kReplacementCharacter) + std::string(kReplacementCharacter));
        // nanoGPT's example: encode("hii there")
        QCOMPARE(chars.encode("hii there"), (std::vector<int32_t>{46, 47, 47, 1, 58, 46, 43, 56, 43}));
        const auto ids = chars.tryEncode(m_shakespeare);
        QVERIFY(ids.ok());
        QCOMPARE(ids->size(), m_shakespeare.size());
        QCOMPARE(chars.decode(*ids), m_shakespeare);
        QCOMPARE(chars.endOfText(), std::nullopt);
        QCOMPARE(chars.kind(), std::string("char"));
    }

    void charUnknownInput_data()
    {
        QTest::addColumn<QByteArray>("text");
        QTest::addColumn<QString>("code");
        QTest::addColumn<QString>("mentions");
        QTest::addColumn<QByteArray>("lenient"); // what encode() keeps, decoded
        QTest::newRow("unknown char") << QByteArray("ab\xE2\x82\xAC") << QStringLiteral("unknown_char")
                                      << QStringLiteral("U+20AC '\u20ac' at byte offset 2") << QByteArray("ab");
        QTest::newRow("invalid utf-8") << QByteArray("a\xFF"
                                                     "b")
                                       << QStringLiteral("invalid_utf8") << QStringLiteral("byte offset 1")
                                       << QByteArray("ab");
        QTest::newRow("unknown control") << QByteArray("\x01"
                                                       "a")
                                         << QStringLiteral("unknown_char") << QStringLiteral("U+0001 at byte offset 0")
                                         << QByteArray("a");
    }

    void charUnknownInput()
    {
        QFETCH(QByteArray, text);
        QFETCH(QString, code);
        QFETCH(QString, mentions);
        QFETCH(QByteArray, lenient);
        auto tokenizer = CharTokenizer::fromText("abc\xC3\xA9");
        QVERIFY(tokenizer.ok());
        const auto strict = (*tokenizer)->tryEncode(str(text));
        QVERIFY(!strict.ok());
        QCOMPARE(QString::fromStdString(strict.error().code), code);
        const QString message = QString::fromStdString(strict.error().message);
        QVERIFY2(message.contains(mentions), qPrintable(message));
        QCOMPARE(bytes((*tokenizer)->decode((*tokenizer)->encode(str(text)))), lenient);
    }

    void charSaveAndLoad()
    {
        auto built = CharTokenizer::fromText("hello wörld \xF0\x9F\x98\x80\n");
        QVERIFY(built.ok());
        QTemporaryDir dir;
        const std::filesystem::path out = dir.path().toStdString();
        QVERIFY((*built)->save(out).ok());
        auto loaded = loadTokenizer(out);
        QVERIFY(loaded.ok());
        QCOMPARE((*loaded)->kind(), std::string("char"));
        QCOMPARE((*loaded)->vocabSize(), 11);
        const std::string text = "öl \xF0\x9F\x98\x80 he";
        QCOMPARE((*loaded)->encode(text), (*built)->encode(text));
        QCOMPARE((*loaded)->decode((*loaded)->encode(text)), text);
    }

    void badCharFiles_data()
    {
        QTest::addColumn<QByteArray>("content");
        QTest::addColumn<QString>("mentions");
        QTest::newRow("truncated") << QByteArray("{\"type\": \"char\", \"version\": 1, \"chars\": [\"a\", ")
                                   << QStringLiteral("not valid JSON");
        QTest::newRow("wrong type") << QByteArray("{\"type\": \"bpe\", \"version\": 1, \"chars\": []}")
                                    << QStringLiteral("\"type\": \"char\"");
        QTest::newRow("wrong version") << QByteArray("{\"type\": \"char\", \"version\": 9, \"chars\": [\"a\"]}")
                                       << QStringLiteral("version");
        QTest::newRow("two characters") << QByteArray("{\"type\": \"char\", \"version\": 1, \"chars\": [\"ab\"]}")
                                        << QStringLiteral("chars[0]");
        QTest::newRow("out of order") << QByteArray("{\"type\": \"char\", \"version\": 1, \"chars\": [\"b\", \"a\"]}")
                                      << QStringLiteral("chars[1]");
        QTest::newRow("empty") << QByteArray("{\"type\": \"char\", \"version\": 1, \"chars\": []}")
                               << QStringLiteral("at least one");
    }

    void badCharFiles()
    {
        QFETCH(QByteArray, content);
        QFETCH(QString, mentions);
        QTemporaryDir dir;
        const std::filesystem::path out = dir.path().toStdString();
        writeAll(out / "chars.json", str(content));
        auto tokenizer = loadTokenizer(out);
        QVERIFY(!tokenizer.ok());
        const QString message = QString::fromStdString(tokenizer.error().message);
        QVERIFY2(message.contains(QStringLiteral("chars.json")), qPrintable(message));
        QVERIFY2(message.contains(mentions), qPrintable(message));
    }

    void noTokenizerFolder()
    {
        QTemporaryDir dir;
        auto empty = loadTokenizer(dir.path().toStdString());
        QVERIFY(!empty.ok());
        QVERIFY(QString::fromStdString(empty.error().message).contains(QStringLiteral("chars.json")));
        auto missing = loadTokenizer(dir.path().toStdString() + "/nope");
        QVERIFY(!missing.ok());
        QCOMPARE(missing.error().code, std::string("not_found"));
    }
};

QTEST_GUILESS_MAIN(TestTokenizer)
#include "tst_tokenizer.moc"
