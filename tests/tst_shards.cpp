// Token shards (llm.c's format), the batch sampler and data folders.
#include "engine/batch_sampler.h"
#include "engine/data_set.h"
#include "engine/token_shard.h"

#include <QTemporaryDir>
#include <QTest>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <numeric>

using namespace crowdtrain;
using namespace crowdtrain::engine;

namespace {

std::string readAll(const std::filesystem::path& file)
{
    std::ifstream in(file, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

void writeAll(const std::filesystem::path& file, std::string_view content)
{
    std::ofstream(file, std::ios::binary) << content;
}

// Token k is first + k, so a window's first token tells where it starts.
std::vector<uint16_t> counting(std::size_t count, uint16_t first = 0)
{
    std::vector<uint16_t> tokens(count);
    std::iota(tokens.begin(), tokens.end(), first);
    return tokens;
}

TokenShard openOrFail(const std::filesystem::path& file)
{
    auto shard = TokenShard::open(file);
    if (!shard)
        qFatal("%s", shard.error().message.c_str());
    return std::move(*shard);
}

struct Batch {
    std::vector<int64_t> x;
    std::vector<int64_t> y;
    bool operator==(const Batch&) const = default;
};

Batch draw(BatchSampler& sampler, int64_t batch)
{
    Batch b{std::vector<int64_t>(static_cast<std::size_t>(batch * sampler.blockSize())),
        std::vector<int64_t>(static_cast<std::size_t>(batch * sampler.blockSize()))};
    sampler.next(batch, b.x.data(), b.y.data());
    return b;
}

} // namespace

class TestShards : public QObject {
    Q_OBJECT

private:
    QTemporaryDir m_dir;

    std::filesystem::path path(const std::string& name) const { return m_dir.path().toStdString() + "/" + name; }

    std::filesystem::path shardOf(const std::string& name, const std::vector<uint16_t>& tokens) const
    {
        const auto file = path(name);
        const Status status = writeTokenShard(file, tokens);
        if (!status)
            qFatal("%s", status.error().message.c_str());
        return file;
    }

private slots:
    void roundTrip_data()
    {
        QTest::addColumn<int>("count");
        QTest::newRow("empty") << 0;
        QTest::newRow("one") << 1;
        QTest::newRow("thousand") << 1000;
        QTest::newRow("all uint16 values") << 70000;
    }

    void roundTrip()
    {
        QFETCH(int, count);
        const auto tokens = counting(static_cast<std::size_t>(count));
        const auto file = shardOf("round_trip.bin", tokens);
        // The bytes are llm.c's: 256 int32 header, then uint16 tokens.
        const std::string raw = readAll(file);
        QCOMPARE(raw.size(), std::size_t(1024 + 2 * count));
        int32_t header[256];
        std::memcpy(header, raw.data(), sizeof header);
        QCOMPARE(header[0], 20240520);
        QCOMPARE(header[1], 1);
        QCOMPARE(header[2], count);
        QVERIFY(std::all_of(header + 3, header + 256, [](int32_t v) { return v == 0; }));

        const TokenShard shard = openOrFail(file);
        QCOMPARE(shard.size(), uint64_t(count));
        QVERIFY(std::equal(tokens.begin(), tokens.end(), shard.tokens()));
        QCOMPARE(shard.path(), file);
        QVERIFY(std::filesystem::directory_iterator(m_dir.path().toStdString())->path() == file);
        std::filesystem::remove(file);
    }

    void streamingWriter()
    {
        const auto file = path("streamed.bin");
        {
            auto writer = TokenShardWriter::create(file);
            QVERIFY(writer.ok());
            QVERIFY(writer->append(counting(10)).ok());
            QVERIFY(writer->append(counting(5, 10)).ok());
            QCOMPARE(writer->size(), uint64_t(15));
            QVERIFY(!std::filesystem::exists(file)); // only the temporary name so far
            QVERIFY(writer->finish().ok());
        }
        const TokenShard shard = openOrFail(file);
        const auto expected = counting(15);
        QVERIFY(std::equal(expected.begin(), expected.end(), shard.tokens()));

        // A writer dropped before finish() leaves nothing behind.
        const auto abandoned = path("abandoned.bin");
        {
            auto writer = TokenShardWriter::create(abandoned);
            QVERIFY(writer.ok());
            QVERIFY(writer->append(counting(10)).ok());
        }
        QVERIFY(!std::filesystem::exists(abandoned));
        for (const auto& entry : std::filesystem::directory_iterator(m_dir.path().toStdString()))
            QVERIFY2(entry.path().filename().string().find("tmp") == std::string::npos, entry.path().c_str());
        std::filesystem::remove(file);
    }

    void moveKeepsTheMapping()
    {
        TokenShard first = openOrFail(shardOf("move.bin", counting(100)));
        const uint16_t* tokens = first.tokens();
        TokenShard second(std::move(first));
        QCOMPARE(second.tokens(), tokens);
        QCOMPARE(second.size(), uint64_t(100));
        QCOMPARE(first.size(), uint64_t(0));
        TokenShard third = openOrFail(shardOf("move2.bin", counting(3)));
        third = std::move(second);
        QCOMPARE(third.size(), uint64_t(100));
        QCOMPARE(third.tokens()[99], uint16_t(99));
    }

    void badShards_data()
    {
        QTest::addColumn<QString>("damage");
        QTest::addColumn<QString>("mentions");
        QTest::newRow("bad magic") << QStringLiteral("magic")
                                   << QStringLiteral("bad magic 20240521 (expected 20240520)");
        QTest::newRow("bad version") << QStringLiteral("version") << QStringLiteral("unsupported version 7");
        QTest::newRow("truncated") << QStringLiteral("truncate")
                                   << QStringLiteral("truncated: 1190 bytes, expected 1224 for 100 tokens");
        QTest::newRow("trailing bytes") << QStringLiteral("append")
                                        << QStringLiteral("trailing bytes: 1225 bytes, expected 1224");
        QTest::newRow("short header") << QStringLiteral("header") << QStringLiteral("truncated: 500 bytes");
        QTest::newRow("negative count") << QStringLiteral("negative") << QStringLiteral("negative token count");
        QTest::newRow("missing") << QStringLiteral("missing") << QStringLiteral("no such shard");
    }

    void badShards()
    {
        QFETCH(QString, damage);
        QFETCH(QString, mentions);
        const auto file = shardOf("damaged_" + damage.toStdString() + ".bin", counting(100));
        std::string raw = readAll(file);
        const auto setInt = [&](int index, int32_t value) { std::memcpy(raw.data() + 4 * index, &value, 4); };
        if (damage == QStringLiteral("magic"))
            setInt(0, 20240521);
        else if (damage == QStringLiteral("version"))
            setInt(1, 7);
        else if (damage == QStringLiteral("truncate"))
            raw.resize(raw.size() - 34);
        else if (damage == QStringLiteral("append"))
            raw += 'x';
        else if (damage == QStringLiteral("header"))
            raw.resize(500);
        else if (damage == QStringLiteral("negative"))
            setInt(2, -5);
        writeAll(file, raw);
        if (damage == QStringLiteral("missing"))
            std::filesystem::remove(file);
        const auto shard = TokenShard::open(file);
        QVERIFY(!shard.ok());
        const QString message = QString::fromStdString(shard.error().message);
        QVERIFY2(message.contains(QString::fromStdString(file.string())), qPrintable(message));
        QVERIFY2(message.contains(mentions), qPrintable(message));
        std::filesystem::remove(file);
    }

    void unwritableShard()
    {
        const Status status = writeTokenShard(path("no/such/folder/x.bin"), counting(3));
        QVERIFY(!status.ok());
        QVERIFY(QString::fromStdString(status.error().message).contains(QStringLiteral("x.bin")));
    }

    void samplerIsDeterministicAndResumable()
    {
        const TokenShard shard = openOrFail(shardOf("sampler.bin", counting(5000)));
        auto a = BatchSampler::create({{&shard, 0, shard.size()}}, 16, 1234);
        auto b = BatchSampler::create({{&shard, 0, shard.size()}}, 16, 1234);
        auto other = BatchSampler::create({{&shard, 0, shard.size()}}, 16, 1235);
        QVERIFY(a.ok() && b.ok() && other.ok());
        std::vector<Batch> stream;
        for (int i = 0; i < 10; ++i)
            stream.push_back(draw(*a, 8));
        QCOMPARE(a->position(), uint64_t(10));
        for (int i = 0; i < 10; ++i)
            QVERIFY(draw(*b, 8) == stream[static_cast<std::size_t>(i)]);
        QVERIFY(!(draw(*other, 8) == stream[0]));
        QVERIFY(!(stream[0] == stream[1]));

        // A fresh sampler resumed at batch 6 continues exactly like `a` did.
        auto resumed = BatchSampler::create({{&shard, 0, shard.size()}}, 16, 1234);
        QVERIFY(resumed.ok());
        resumed->setPosition(6);
        for (int i = 6; i < 10; ++i)
            QVERIFY(draw(*resumed, 8) == stream[static_cast<std::size_t>(i)]);
        QCOMPARE(resumed->position(), uint64_t(10));
    }

    void windowsAreShiftedAndInsideSlices()
    {
        const TokenShard first = openOrFail(shardOf("slices_a.bin", counting(30000)));
        const TokenShard second = openOrFail(shardOf("slices_b.bin", counting(30000, 30000)));
        const int64_t block = 32;
        std::vector<ShardSlice> slices = {{&first, 100, 5000}, {&first, 0, 5}, {&second, 20000, 20100}};
        auto sampler = BatchSampler::create(slices, block, 7);
        QVERIFY(sampler.ok());
        QCOMPARE(sampler->tokenCount(), uint64_t(4900 + 5 + 100));
        QCOMPARE(sampler->windowCount(), uint64_t((4900 - 32) + (100 - 32)));
        int inSecond = 0;
        const int rows = 4000;
        const Batch batch = draw(*sampler, rows);
        for (int row = 0; row < rows; ++row) {
            const int64_t* x = batch.x.data() + row * block;
            const int64_t* y = batch.y.data() + row * block;
            for (int64_t i = 0; i < block; ++i) {
                QCOMPARE(y[i], x[i] + 1); // counting tokens: the next token is one more
                if (i + 1 < block)
                    QCOMPARE(y[i], x[i + 1]);
            }
            // The window [x0, x0 + block] lies inside one slice.
            const int64_t start = x[0];
            const bool inA = start >= 100 && start + block + 1 <= 5000;
            const bool inB = start >= 50000 && start + block + 1 <= 50100;
            QVERIFY2(inA || inB, qPrintable(QString::number(start)));
            inSecond += inB;
        }
        // Slices weigh by their number of windows: 68 of 4936 here.
        const double expected = rows * 68.0 / 4936.0;
        QVERIFY2(std::abs(inSecond - expected) < 5 * std::sqrt(expected), qPrintable(QString::number(inSecond)));
    }

    void everyWindowIsReachable()
    {
        const TokenShard shard = openOrFail(shardOf("small.bin", counting(20)));
        auto sampler = BatchSampler::create({{&shard, 0, 20}}, 10, 99);
        QVERIFY(sampler.ok());
        QCOMPARE(sampler->windowCount(), uint64_t(10));
        std::vector<int> hits(10, 0);
        for (int i = 0; i < 500; ++i) {
            const Batch batch = draw(*sampler, 10);
            for (int row = 0; row < 10; ++row)
                ++hits[static_cast<std::size_t>(batch.x[static_cast<std::size_t>(row * 10)])];
        }
        for (const int count : hits) // 500 expected each
            QVERIFY2(count > 380 && count < 620, qPrintable(QString::number(count)));
    }

    // Tiles: an epoch draws every tile once (non-overlapping windows, block
    // apart, inside their slices, every slice's); the next epoch reshuffles.
    void tilesCoverEachTileOncePerEpoch()
    {
        const TokenShard first = openOrFail(shardOf("tiles_a.bin", counting(30000)));
        const TokenShard second = openOrFail(shardOf("tiles_b.bin", counting(30000, 30000)));
        const int64_t block = 16;
        // The last slice has room for one tile only (block + 1 <= 25 < 2 * block + 1).
        const std::vector<ShardSlice> slices = {{&first, 100, 5000}, {&second, 0, 999}, {&second, 20000, 20025}};
        auto sampler = BatchSampler::create(slices, block, 11, Sampling::Tiles);
        QVERIFY(sampler.ok());
        QCOMPARE(sampler->tileCount(), uint64_t((4899 / 16 - 1) + (998 / 16 - 1) + 1));
        bool shifted = true; // y is x shifted by one in every row
        const auto epoch = [&] {
            std::vector<int64_t> starts;
            for (uint64_t i = 0; i < sampler->tileCount(); ++i) {
                const Batch one = draw(*sampler, 1);
                for (int64_t j = 0; j < block; ++j)
                    shifted = shifted && one.y[std::size_t(j)] == one.x[std::size_t(j)] + 1;
                starts.push_back(one.x[0]);
            }
            return starts;
        };
        const std::vector<int64_t> firstEpoch = epoch();
        const std::vector<int64_t> secondEpoch = epoch();
        QVERIFY(shifted);
        for (const auto& starts : {firstEpoch, secondEpoch}) {
            std::vector<int64_t> sorted = starts;
            std::sort(sorted.begin(), sorted.end());
            QVERIFY(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end()); // each tile once
            int perSlice[3] = {0, 0, 0};
            for (std::size_t i = 0; i < sorted.size(); ++i) {
                const int64_t s = sorted[i];
                const int in = s >= 100 && s + block + 1 <= 5000 ? 0
                    : s >= 30000 && s + block + 1 <= 30999       ? 1
                    : s >= 50000 && s + block + 1 <= 50025       ? 2
                                                                 : -1;
                QVERIFY2(in >= 0, qPrintable(QString::number(s)));
                ++perSlice[in];
                if (i > 0 && in == (sorted[i - 1] < 30000 ? 0 : sorted[i - 1] < 50000 ? 1 : 2))
                    QCOMPARE(s - sorted[i - 1], block); // one offset per slice and epoch: tiles abut
            }
            QCOMPARE(perSlice[0], 4899 / 16 - 1);
            QCOMPARE(perSlice[1], 998 / 16 - 1);
            QCOMPARE(perSlice[2], 1);
        }
        QVERIFY(firstEpoch != secondEpoch);
        // Shuffled: not in slice order.
        QVERIFY(!std::is_sorted(firstEpoch.begin(), firstEpoch.end()));
    }

    void tilesAreDeterministicAndResumable()
    {
        const TokenShard shard = openOrFail(shardOf("tiles_resume.bin", counting(5000)));
        auto a = BatchSampler::create({{&shard, 0, shard.size()}}, 16, 5, Sampling::Tiles);
        auto other = BatchSampler::create({{&shard, 0, shard.size()}}, 16, 6, Sampling::Tiles);
        QVERIFY(a.ok() && other.ok());
        QCOMPARE(a->sampling(), Sampling::Tiles);
        std::vector<Batch> stream;
        for (int i = 0; i < 80; ++i) // 640 windows: past the first epoch's 311 tiles
            stream.push_back(draw(*a, 8));
        QVERIFY(!(draw(*other, 8) == stream[0]));
        auto resumed = BatchSampler::create({{&shard, 0, shard.size()}}, 16, 5, Sampling::Tiles);
        QVERIFY(resumed.ok());
        resumed->setPosition(37);
        for (int i = 37; i < 80; ++i)
            QVERIFY(draw(*resumed, 8) == stream[static_cast<std::size_t>(i)]);
    }

    void samplerErrors_data()
    {
        QTest::addColumn<int>("begin");
        QTest::addColumn<int>("end");
        QTest::addColumn<int>("block");
        QTest::addColumn<QString>("code");
        QTest::newRow("slice too short") << 0 << 16 << 16 << QStringLiteral("data_too_short");
        QTest::newRow("just long enough") << 0 << 17 << 16 << QString();
        QTest::newRow("past the shard") << 0 << 101 << 4 << QStringLiteral("bad_argument");
        QTest::newRow("reversed") << 50 << 10 << 4 << QStringLiteral("bad_argument");
        QTest::newRow("zero block") << 0 << 100 << 0 << QStringLiteral("bad_argument");
    }

    void samplerErrors()
    {
        QFETCH(int, begin);
        QFETCH(int, end);
        QFETCH(int, block);
        QFETCH(QString, code);
        const TokenShard shard = openOrFail(shardOf("errors.bin", counting(100)));
        auto sampler = BatchSampler::create({{&shard, uint64_t(begin), uint64_t(end)}}, block, 1);
        QCOMPARE(sampler.ok(), code.isEmpty());
        if (!sampler.ok())
            QCOMPARE(QString::fromStdString(sampler.error().code), code);
    }

    void openLlmcDataSet()
    {
        QTemporaryDir dir;
        const std::filesystem::path root = dir.path().toStdString();
        QVERIFY(writeTokenShard(root / "fineweb_val_000000.bin", counting(10)).ok());
        QVERIFY(writeTokenShard(root / "fineweb_train_000002.bin", counting(30)).ok());
        QVERIFY(writeTokenShard(root / "fineweb_train_000001.bin", counting(20)).ok());
        writeAll(root / "README.txt", "not a shard");
        writeAll(root / "notes.bin.txt", "not a shard either");
        std::filesystem::create_directory(root / "tokenizer");
        auto dataSet = openDataSet(root);
        QVERIFY2(dataSet.ok(), dataSet.ok() ? "" : dataSet.error().message.c_str());
        QCOMPARE(dataSet->train.size(), std::size_t(2));
        QCOMPARE(dataSet->train[0].path().filename().string(), std::string("fineweb_train_000001.bin"));
        QCOMPARE(dataSet->train[1].path().filename().string(), std::string("fineweb_train_000002.bin"));
        QCOMPARE(dataSet->val.size(), std::size_t(1));
        QCOMPARE(dataSet->trainTokens(), uint64_t(50));
        QCOMPARE(dataSet->valTokens(), uint64_t(10));
        QVERIFY(dataSet->tokenizerDir.has_value());

        // Slices into a moved DataSet stay valid.
        DataSet moved = std::move(*dataSet);
        auto sampler = BatchSampler::create(wholeShards(moved.train), 8, 3);
        QVERIFY(sampler.ok());
        QCOMPARE(sampler->tokenCount(), uint64_t(50));
        draw(*sampler, 4);
    }

    void openTinyShakespeareNames()
    {
        QTemporaryDir dir;
        const std::filesystem::path root = dir.path().toStdString();
        QVERIFY(writeTokenShard(root / "tiny_shakespeare_train.bin", counting(40)).ok());
        QVERIFY(writeTokenShard(root / "tiny_shakespeare_val.bin", counting(4)).ok());
        auto dataSet = openDataSet(root);
        QVERIFY(dataSet.ok());
        QCOMPARE(dataSet->train.size(), std::size_t(1));
        QCOMPARE(dataSet->val.size(), std::size_t(1));
        QVERIFY(!dataSet->tokenizerDir.has_value());
    }

    void shardRoles_data()
    {
        QTest::addColumn<QString>("name");
        QTest::addColumn<int>("role");
        const int none = int(ShardRole::None), train = int(ShardRole::Train), val = int(ShardRole::Val);
        QTest::newRow("fineweb train") << QStringLiteral("fineweb_train_000001.bin") << train;
        QTest::newRow("fineweb val") << QStringLiteral("fineweb_val_000000.bin") << val;
        QTest::newRow("tinystories") << QStringLiteral("TinyStories_val.bin") << val;
        QTest::newRow("glob-like") << QStringLiteral("mytrainset.bin") << train;
        QTest::newRow("word decides") << QStringLiteral("evaluation_train_000000.bin") << train;
        QTest::newRow("validation word") << QStringLiteral("trainset_validation.bin") << val;
        QTest::newRow("both words") << QStringLiteral("train_val.bin") << int(ShardRole::Ambiguous);
        QTest::newRow("neither") << QStringLiteral("model.bin") << none;
        QTest::newRow("not .bin") << QStringLiteral("train.txt") << none;
    }

    void shardRoles()
    {
        QFETCH(QString, name);
        QFETCH(int, role);
        QCOMPARE(int(shardRoleOf(name.toStdString())), role);
    }

    void badDataSets_data()
    {
        QTest::addColumn<QString>("layout");
        QTest::addColumn<QString>("mentions");
        QTest::newRow("no train shard") << QStringLiteral("x_val.bin") << QStringLiteral("no train shards");
        QTest::newRow("ambiguous name") << QStringLiteral("train_val.bin") << QStringLiteral("train_val.bin");
        QTest::newRow("corrupt shard") << QStringLiteral("corrupt_train.bin") << QStringLiteral("corrupt_train.bin");
        QTest::newRow("missing folder") << QString() << QStringLiteral("no such data folder");
    }

    void badDataSets()
    {
        QFETCH(QString, layout);
        QFETCH(QString, mentions);
        QTemporaryDir dir;
        std::filesystem::path root = dir.path().toStdString();
        if (layout.isEmpty())
            root /= "missing";
        else if (layout.startsWith(QStringLiteral("corrupt")))
            writeAll(root / layout.toStdString(), std::string(2000, 'x'));
        else
            QVERIFY(writeTokenShard(root / layout.toStdString(), counting(10)).ok());
        auto dataSet = openDataSet(root);
        QVERIFY(!dataSet.ok());
        const QString message = QString::fromStdString(dataSet.error().message);
        QVERIFY2(message.contains(mentions), qPrintable(message));
    }
};

QTEST_GUILESS_MAIN(TestShards)
#include "tst_shards.moc"
