// Published checkpoints: a folder the engine's Hugging Face importer loads
// back bit for bit, metadata with sizes and SHA-256, listing, retention and
// cleanup of interrupted publishes.
#include "net/coordinator/checkpoint_store.h"
#include "net/coordinator/evaluation.h"
#include "net/transfer/sha256.h"

#include "engine/char_tokenizer.h"
#include "engine/hf_gpt2.h"
#include "engine/model_io.h"

#include "coordinator_fixtures.h"

#include <nlohmann/json.hpp>

#include <QTemporaryDir>
#include <QTest>

#include <fstream>

using namespace crowdtrain;
using namespace crowdtrain::coordinator;

namespace {

using testing::orFail;

engine::GptConfig tinyConfig()
{
    return engine::GptConfig{.nLayer = 1, .nHead = 2, .nEmbd = 8, .blockSize = 8, .vocabSize = 16, .dropout = 0.0};
}

// The model's parameters flattened in namedParameters() order (the flat
// vector of docs/protocol.md, §7).
std::vector<float> flatOf(engine::Gpt& model)
{
    std::vector<float> flat;
    for (const auto& [name, tensor] : engine::namedParameters(model)) {
        const torch::Tensor t = tensor.detach().contiguous().to(torch::kFloat32);
        flat.insert(flat.end(), t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
    }
    return flat;
}

std::vector<int64_t> rounds(const std::vector<CheckpointInfo>& infos)
{
    std::vector<int64_t> out;
    for (const auto& info : infos)
        out.push_back(info.round);
    return out;
}

} // namespace

class TestCheckpointStore : public QObject {
    Q_OBJECT

private:
    QTemporaryDir m_dir;

    std::filesystem::path path(const std::string& name) const { return m_dir.path().toStdString() + "/" + name; }

private slots:
    void unflattenMatchesModelOrder()
    {
        torch::manual_seed(3);
        engine::Gpt model(tinyConfig());
        const std::vector<float> flat = flatOf(model);
        QCOMPARE(int64_t(flat.size()), engine::parameterCount(tinyConfig()));
        const engine::NamedTensors named = orFail(unflattenParameters(tinyConfig(), flat));
        const auto modelParams = engine::namedParameters(model);
        QCOMPARE(named.size(), modelParams.size());
        for (std::size_t i = 0; i < named.size(); ++i) {
            QCOMPARE(named[i].first, modelParams[i].first);
            QVERIFY(torch::equal(named[i].second, modelParams[i].second.detach()));
        }
        QVERIFY(!unflattenParameters(tinyConfig(), std::span<const float>(flat).first(flat.size() - 1)).ok());
        std::vector<float> longer = flat;
        longer.push_back(0);
        QVERIFY(!unflattenParameters(tinyConfig(), longer).ok());
    }

    void publishLoadsBack()
    {
        torch::manual_seed(5);
        engine::Gpt model(tinyConfig());
        const engine::NamedTensors named = orFail(unflattenParameters(tinyConfig(), flatOf(model)));
        CheckpointStore store = orFail(CheckpointStore::open(path("publish"), CheckpointSpec{}));
        const CheckpointInfo info = orFail(store.publish(10, 123456, 2.75, tinyConfig(), named, 1716206400000));
        QCOMPARE(info.dir, path("publish") / "round-10");
        QCOMPARE(info.created, std::string("2024-05-20T12:00:00Z"));

        // The engine's importer (as GPT2LMHeadModel.from_pretrained would) reads it back exactly.
        const engine::HfGpt2Weights weights = orFail(engine::importHuggingFaceGpt2(info.dir));
        QCOMPARE(weights.config, tinyConfig());
        QCOMPARE(weights.parameters.size(), named.size());
        for (std::size_t i = 0; i < named.size(); ++i) {
            QCOMPARE(weights.parameters[i].first, named[i].first);
            QVERIFY(torch::equal(weights.parameters[i].second, named[i].second));
        }

        // metadata.json: round, tokens, val_loss, files with sizes and SHA-256.
        std::ifstream in(info.dir / "metadata.json");
        const nlohmann::json meta = nlohmann::json::parse(in);
        QCOMPARE(meta["round"].get<int64_t>(), int64_t(10));
        QCOMPARE(meta["tokens"].get<int64_t>(), int64_t(123456));
        QCOMPARE(meta["val_loss"].get<double>(), 2.75);
        QCOMPARE(meta["files"].size(), std::size_t(2));
        for (const auto& file : meta["files"]) {
            const auto onDisk = info.dir / file["name"].get<std::string>();
            QCOMPARE(file["bytes"].get<uint64_t>(), uint64_t(std::filesystem::file_size(onDisk)));
            QCOMPARE(file["sha256"].get<std::string>(), orFail(crowdtrain::net::sha256OfFile(onDisk)));
        }
        QCOMPARE(info.totalBytes(),
            uint64_t(std::filesystem::file_size(info.dir / "model.safetensors")
                + std::filesystem::file_size(info.dir / "config.json")));

        const auto listed = orFail(store.list());
        QCOMPARE(listed.size(), std::size_t(1));
        QCOMPARE(listed[0].files[1].sha256, info.files[1].sha256);
        QCOMPARE(orFail(store.find(10)).tokens, int64_t(123456));
        QVERIFY(!store.find(11).ok());

        // Published folders are never overwritten.
        QCOMPARE(store.publish(10, 1, 1.0, tinyConfig(), named, 0).error().code, std::string("checkpoint_exists"));
        // A bad parameter list leaves nothing behind.
        engine::NamedTensors missing(named.begin(), named.end() - 1);
        QVERIFY(!store.publish(11, 1, std::nullopt, tinyConfig(), missing, 0).ok());
        int entries = 0;
        for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(path("publish")))
            ++entries;
        QCOMPARE(entries, 1);
    }

    void extraFilesAreListedAndChecked()
    {
        torch::manual_seed(5);
        engine::Gpt model(tinyConfig());
        const engine::NamedTensors named = orFail(unflattenParameters(tinyConfig(), flatOf(model)));
        CheckpointStore store = orFail(CheckpointStore::open(path("extra"), CheckpointSpec{}));
        const std::string samples = R"({"samples": []})";
        const CheckpointInfo info
            = orFail(store.publish(2, 10, std::nullopt, tinyConfig(), named, 0, {{"samples.json", samples}}));
        QCOMPARE(info.files.size(), std::size_t(3));
        QCOMPARE(info.files[2].name, std::string("samples.json"));
        QCOMPARE(info.files[2].bytes, uint64_t(samples.size()));
        QCOMPARE(info.files[2].sha256, crowdtrain::net::sha256Hex(samples));
        QCOMPARE(orFail(store.find(2)).files.size(), std::size_t(3));
        // Names that would clash with the model's files, or leave the folder, are refused whole.
        for (const char* bad : {"metadata.json", "config.json", "../escape.json", ""})
            QCOMPARE(store.publish(3, 10, std::nullopt, tinyConfig(), named, 0, {{bad, "x"}}).error().code,
                std::string("invalid_argument"));
        QVERIFY(!std::filesystem::exists(path("extra") / "round-3"));
    }

    // The coordinator's continuations of the project's prompts: seeded, so
    // the same weights always write the same text, and other weights write
    // other text.
    void samplesAreSeeded()
    {
        const std::filesystem::path tokenizerDir = path("samples-tokenizer");
        auto tokenizer = orFail(engine::CharTokenizer::fromText("abcdefgh ijklmno"));
        QVERIFY(tokenizer->save(tokenizerDir).ok());
        engine::DataSet data;
        data.tokenizerDir = tokenizerDir;
        ProjectSpec spec;
        spec.name = "samples";
        spec.model = tinyConfig();
        spec.prompts = {"ab", "hij"};
        torch::manual_seed(5);
        engine::Gpt model(tinyConfig());
        model->eval();
        const std::vector<float> first = flatOf(model);
        torch::manual_seed(6);
        engine::Gpt other(tinyConfig());
        const std::vector<float> second = flatOf(other);

        Evaluation evaluation(spec, data, model, {});
        const std::string once = evaluation.writeSamples(4, first);
        QCOMPARE(evaluation.writeSamples(4, first), once);
        QVERIFY(evaluation.writeSamples(4, second) != once);
        const nlohmann::json doc = nlohmann::json::parse(once);
        QCOMPARE(doc["round"].get<int64_t>(), int64_t(4));
        QCOMPARE(doc["samples"].size(), std::size_t(2));
        QCOMPARE(doc["samples"][1]["prompt"].get<std::string>(), std::string("hij"));
        const std::string text = doc["samples"][0]["text"].get<std::string>();
        QCOMPARE(int64_t(text.size()), Evaluation::kSampleTokens); // 16 one-byte characters, vocabulary 16

        // On the evaluation thread: only when a checkpoint is due.
        evaluation.start(5, 100, std::make_shared<const std::vector<float>>(first), {}, true);
        QCOMPARE(evaluation.finish(true)->samplesJson, evaluation.writeSamples(5, first));
        evaluation.start(6, 100, std::make_shared<const std::vector<float>>(first), {}, false);
        QVERIFY(evaluation.finish(true)->samplesJson.empty());
    }

    void retentionKeepsLastAndMilestones()
    {
        const engine::NamedTensors named
            = orFail(unflattenParameters(tinyConfig(), std::vector<float>(engine::parameterCount(tinyConfig()), 0.5f)));
        CheckpointStore store = orFail(CheckpointStore::open(path("retention"), CheckpointSpec{1, 2, 4}));
        for (int64_t round = 1; round <= 9; ++round)
            QVERIFY(store.publish(round, round * 100, std::nullopt, tinyConfig(), named, round).ok());
        QCOMPARE(rounds(orFail(store.list())), (std::vector<int64_t>{4, 8, 9}));
        QVERIFY(!std::filesystem::exists(path("retention") / "round-7"));
        QVERIFY(!orFail(store.find(9)).valLoss);

        CheckpointStore noMilestones = orFail(CheckpointStore::open(path("retention"), CheckpointSpec{1, 1, 0}));
        QCOMPARE(orFail(noMilestones.applyRetention()), (std::vector<int64_t>{4, 8}));
        QCOMPARE(rounds(orFail(noMilestones.list())), (std::vector<int64_t>{9}));
    }

    void interruptedPublishIsCleanedUp()
    {
        const auto dir = path("interrupted");
        std::filesystem::create_directories(dir / ".round-5.tmp-123-456");
        std::ofstream(dir / ".round-5.tmp-123-456" / "model.safetensors") << "half";
        std::filesystem::create_directories(dir / "round-6"); // no metadata: not listed
        CheckpointStore store = orFail(CheckpointStore::open(dir, CheckpointSpec{}));
        QVERIFY(!std::filesystem::exists(dir / ".round-5.tmp-123-456"));
        QVERIFY(orFail(store.list()).empty());
    }

    void isDue()
    {
        CheckpointStore store = orFail(CheckpointStore::open(path("due"), CheckpointSpec{5, 3, 0}));
        QVERIFY(!store.isDue(0));
        QVERIFY(!store.isDue(4));
        QVERIFY(store.isDue(5));
        QVERIFY(store.isDue(10));
    }
};

QTEST_GUILESS_MAIN(TestCheckpointStore)
#include "tst_checkpoint_store.moc"
