// Hugging Face GPT-2 export and import: the exported layout, round trips,
// folders as the Hub ships them, and rejections. tst_hfgpt2_reference runs
// an export through an independent Python GPT-2.
#include "tests/hf_gpt2_fixtures.h"

#include "engine/hf_gpt2.h"
#include "engine/hf_gpt2_config.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QTest>

#include <fstream>
#include <memory>
#include <set>

using namespace crowdtrain;
using namespace crowdtrain::engine;
using namespace crowdtrain::engine::testing;

namespace {

// A folder laid out as on the Hub, built without the exporter.
void writeHubFolder(const std::filesystem::path& dir, const GptConfig& config, const NamedTensors& ours,
    const std::string& prefix, torch::Dtype dtype, const NamedTensors& extra = {})
{
    std::filesystem::create_directories(dir);
    NamedTensors hf;
    for (const auto& [name, tensor] : ours)
        hf.emplace_back(prefix + name, (isConv1D(name) ? tensor.t() : tensor).to(dtype).contiguous());
    hf.insert(hf.end(), extra.begin(), extra.end());
    QVERIFY(writeSafetensors(dir / "model.safetensors", hf, {{"format", "pt"}}).ok());
    std::ofstream(dir / "config.json") << huggingFaceGpt2ConfigJson(config);
}

std::set<std::string> entries(const std::filesystem::path& dir)
{
    std::set<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(dir))
        names.insert(entry.path().filename().string());
    return names;
}

} // namespace

class TestHfGpt2 : public QObject {
    Q_OBJECT

private slots:
    void initTestCase() { torch::manual_seed(1234); }

    void init()
    {
        m_dir = std::make_unique<QTemporaryDir>();
        QVERIFY(m_dir->isValid());
    }

    // The mapping's name list is the model's, in the model's order.
    void parameterShapesMatchModel()
    {
        const Gpt model(smallConfig());
        const auto shapes = gptParameterShapes(smallConfig());
        const auto params = model->named_parameters();
        QCOMPARE(shapes.size(), params.size());
        for (std::size_t i = 0; i < shapes.size(); ++i) {
            QCOMPARE(shapes[i].first, params[i].key());
            QCOMPARE(shapes[i].second, params[i].value().sizes().vec());
        }
    }

    void exportLayout()
    {
        const GptConfig config = smallConfig();
        const Gpt model = randomModel(config);
        const auto dir = path("export");
        Status exported = exportHuggingFaceGpt2(dir, config, parametersOf(model), {{"round", "7"}});
        QVERIFY2(exported.ok(), exported.ok() ? "" : exported.error().message.c_str());
        QCOMPARE(entries(dir), (std::set<std::string>{"config.json", "model.safetensors"}));
        QCOMPARE(entries(dir.parent_path()), std::set<std::string>{"export"}); // no temporary folder left

        auto file = readSafetensors(dir / "model.safetensors");
        QVERIFY(file.ok());
        QCOMPARE(file->metadata, (std::map<std::string, std::string>{{"format", "pt"}, {"round", "7"}}));
        std::map<std::string, torch::Tensor> stored(file->tensors.begin(), file->tensors.end());
        QCOMPARE(stored.size(), gptParameterShapes(config).size()); // lm_head omitted
        const std::int64_t d = config.nEmbd;
        const std::map<std::string, std::vector<std::int64_t>> conv1dShapes{{"h.1.attn.c_attn.weight", {d, 3 * d}},
            {"h.1.attn.c_proj.weight", {d, d}}, {"h.1.mlp.c_fc.weight", {d, 4 * d}},
            {"h.1.mlp.c_proj.weight", {4 * d, d}}};
        for (const auto& [name, ours] : parametersOf(model)) {
            const auto it = stored.find("transformer." + name);
            QVERIFY2(it != stored.end(), name.c_str());
            QCOMPARE(it->second.scalar_type(), torch::kFloat32);
            QVERIFY2(torch::equal(it->second, isConv1D(name) ? ours.t() : ours), name.c_str());
            if (auto shape = conv1dShapes.find(name); shape != conv1dShapes.end())
                QCOMPARE(it->second.sizes().vec(), shape->second);
        }

        const QJsonObject json = readJson(dir / "config.json");
        QCOMPARE(json.value(QStringLiteral("model_type")).toString(), QStringLiteral("gpt2"));
        QCOMPARE(json.value(QStringLiteral("architectures")).toArray(), QJsonArray{QStringLiteral("GPT2LMHeadModel")});
        const std::pair<const char*, std::int64_t> sizes[]
            = {{"vocab_size", 65}, {"n_positions", 16}, {"n_ctx", 16}, {"n_embd", 32}, {"n_layer", 2}, {"n_head", 4}};
        for (const auto& [key, value] : sizes)
            QCOMPARE(json.value(QLatin1String(key)).toInteger(), qint64(value));
        QVERIFY(json.value(QStringLiteral("n_inner")).isNull());
        QCOMPARE(json.value(QStringLiteral("activation_function")).toString(), QStringLiteral("gelu_new"));
        QCOMPARE(json.value(QStringLiteral("layer_norm_epsilon")).toDouble(), 1e-5);
        QCOMPARE(json.value(QStringLiteral("initializer_range")).toDouble(), 0.02);
        for (const char* key : {"resid_pdrop", "embd_pdrop", "attn_pdrop"})
            QCOMPARE(json.value(QLatin1String(key)).toDouble(), 0.1);
        QVERIFY(json.value(QStringLiteral("tie_word_embeddings")).toBool());
        QCOMPARE(json.value(QStringLiteral("torch_dtype")).toString(), QStringLiteral("float32"));
        // A 65-token vocabulary has no <|endoftext|>; GPT-2's own has it at 50256.
        QVERIFY(json.value(QStringLiteral("bos_token_id")).isNull());
        const QJsonObject gpt2
            = QJsonDocument::fromJson(QByteArray::fromStdString(huggingFaceGpt2ConfigJson(*gptConfigByName("gpt2"))))
                  .object();
        QCOMPARE(gpt2.value(QStringLiteral("bos_token_id")).toInteger(), qint64(50256));
        QCOMPARE(gpt2.value(QStringLiteral("eos_token_id")).toInteger(), qint64(50256));
    }

    void exportImportRoundTrip()
    {
        const GptConfig config = smallConfig();
        const Gpt model = randomModel(config);
        QVERIFY(exportHuggingFaceGpt2(path("rt"), config, parametersOf(model)).ok());
        auto imported = importHuggingFaceGpt2(path("rt"));
        QVERIFY2(imported.ok(), imported.ok() ? "" : imported.error().message.c_str());
        QCOMPARE(imported->config, config);
        const NamedTensors original = parametersOf(model);
        QCOMPARE(imported->parameters.size(), original.size());
        for (std::size_t i = 0; i < original.size(); ++i) {
            QCOMPARE(imported->parameters[i].first, original[i].first);
            QVERIFY2(torch::equal(imported->parameters[i].second, original[i].second), original[i].first.c_str());
            QVERIFY(imported->parameters[i].second.is_contiguous());
        }
    }

    // Re-exporting into a folder keeps the other files in it.
    void exportIntoExistingFolder()
    {
        const GptConfig config = smallConfig();
        const auto dir = path("existing");
        std::filesystem::create_directories(dir);
        std::ofstream(dir / "tokenizer.json") << "{}";
        QVERIFY(exportHuggingFaceGpt2(dir, config, parametersOf(randomModel(config))).ok());
        const Gpt second = randomModel(config);
        QVERIFY(exportHuggingFaceGpt2(dir, config, parametersOf(second)).ok());
        QCOMPARE(entries(dir), (std::set<std::string>{"config.json", "model.safetensors", "tokenizer.json"}));
        auto imported = importHuggingFaceGpt2(dir);
        QVERIFY(imported.ok());
        QVERIFY(torch::equal(imported->parameters.back().second, parametersOf(second).back().second));
    }

    void exportRejects_data()
    {
        QTest::addColumn<QString>("change");
        QTest::addColumn<QString>("phrase");
        QTest::newRow("missing parameter")
            << QStringLiteral("drop ln_f.bias") << QStringLiteral("'ln_f.bias' is missing");
        QTest::newRow("wrong shape") << QStringLiteral("transpose c_fc") << QStringLiteral("has shape [32, 128]");
        QTest::newRow("unknown parameter")
            << QStringLiteral("add extra") << QStringLiteral("'score.weight' is not part");
        QTest::newRow("untied head") << QStringLiteral("untied head") << QStringLiteral("ties them");
        QTest::newRow("duplicate") << QStringLiteral("duplicate") << QStringLiteral("given twice");
        QTest::newRow("format override") << QStringLiteral("format") << QStringLiteral("\"pt\"");
        QTest::newRow("integer tensor") << QStringLiteral("integer") << QStringLiteral("not a floating-point");
    }

    void exportRejects()
    {
        QFETCH(QString, change);
        QFETCH(QString, phrase);
        const GptConfig config = smallConfig();
        NamedTensors params = parametersOf(randomModel(config));
        std::map<std::string, std::string> metadata;
        auto find = [&](const std::string& name) {
            return std::find_if(params.begin(), params.end(), [&](auto& p) { return p.first == name; });
        };
        if (change == QStringLiteral("drop ln_f.bias"))
            params.erase(find("ln_f.bias"));
        if (change == QStringLiteral("transpose c_fc"))
            find("h.0.mlp.c_fc.weight")->second = find("h.0.mlp.c_fc.weight")->second.t();
        if (change == QStringLiteral("add extra"))
            params.emplace_back("score.weight", torch::zeros({2, 32}));
        if (change == QStringLiteral("untied head"))
            params.emplace_back("lm_head.weight", torch::zeros({65, 32}));
        if (change == QStringLiteral("duplicate"))
            params.push_back(params.front());
        if (change == QStringLiteral("format"))
            metadata["format"] = "tf";
        if (change == QStringLiteral("integer"))
            find("wpe.weight")->second = torch::zeros({16, 32}, torch::kInt32);
        Status exported = exportHuggingFaceGpt2(path("rejected"), config, params, metadata);
        QVERIFY(!exported.ok());
        QCOMPARE(exported.error().code, std::string("bad_export"));
        QVERIFY2(
            exported.error().message.find(phrase.toStdString()) != std::string::npos, exported.error().message.c_str());
        QVERIFY(!std::filesystem::exists(path("rejected")));
    }

    // A module that lists its tied head as a parameter exports the same.
    void exportSkipsTiedHead()
    {
        const GptConfig config = smallConfig();
        NamedTensors params = parametersOf(randomModel(config));
        params.emplace_back("lm_head.weight", params.front().second);
        QVERIFY(exportHuggingFaceGpt2(path("tied"), config, params).ok());
        auto file = readSafetensors(path("tied") / "model.safetensors");
        QVERIFY(file.ok());
        for (const auto& [name, tensor] : file->tensors)
            QVERIFY(name != "lm_head.weight" && name != "transformer.lm_head.weight");
    }

    void importVariants_data()
    {
        QTest::addColumn<QString>("variant");
        QTest::newRow("Hub names, mask buffers, tied head") << QStringLiteral("hub");
        QTest::newRow("F16") << QStringLiteral("f16");
        QTest::newRow("BF16") << QStringLiteral("bf16");
        QTest::newRow("sharded") << QStringLiteral("sharded");
    }

    void importVariants()
    {
        QFETCH(QString, variant);
        const GptConfig config = smallConfig();
        const NamedTensors ours = parametersOf(randomModel(config));
        const auto dir = path("hub");
        torch::Dtype dtype = torch::kFloat32;
        if (variant == QStringLiteral("f16"))
            dtype = torch::kFloat16;
        if (variant == QStringLiteral("bf16"))
            dtype = torch::kBFloat16;
        if (variant == QStringLiteral("hub")) {
            // openai-community/gpt2 was saved from GPT2Model: no prefix, with buffers.
            NamedTensors extra{{"lm_head.weight", ours.front().second.clone()}};
            for (int i = 0; i < config.nLayer; ++i) {
                extra.emplace_back("h." + std::to_string(i) + ".attn.bias", torch::ones({1, 1, 16, 16}).tril());
                extra.emplace_back("h." + std::to_string(i) + ".attn.masked_bias", torch::tensor(-1e4));
            }
            writeHubFolder(dir, config, ours, "", dtype, extra);
        } else if (variant == QStringLiteral("sharded")) {
            const std::size_t half = ours.size() / 2;
            writeHubFolder(dir / "a", config, NamedTensors(ours.begin(), ours.begin() + half), "transformer.", dtype);
            writeHubFolder(dir / "b", config, NamedTensors(ours.begin() + half, ours.end()), "transformer.", dtype);
            std::filesystem::rename(dir / "a" / "model.safetensors", dir / "model-00001-of-00002.safetensors");
            std::filesystem::rename(dir / "b" / "model.safetensors", dir / "model-00002-of-00002.safetensors");
            std::filesystem::rename(dir / "a" / "config.json", dir / "config.json");
            QJsonObject map;
            for (std::size_t i = 0; i < ours.size(); ++i)
                map.insert(QString::fromStdString("transformer." + ours[i].first),
                    i < half ? QStringLiteral("model-00001-of-00002.safetensors")
                             : QStringLiteral("model-00002-of-00002.safetensors"));
            std::ofstream(dir / "model.safetensors.index.json")
                << QJsonDocument(QJsonObject{{QStringLiteral("weight_map"), map}}).toJson().toStdString();
        } else {
            writeHubFolder(dir, config, ours, "transformer.", dtype);
        }

        auto imported = importHuggingFaceGpt2(dir);
        QVERIFY2(imported.ok(), imported.ok() ? "" : imported.error().message.c_str());
        QCOMPARE(imported->config, config);
        QCOMPARE(imported->parameters.size(), ours.size());
        for (std::size_t i = 0; i < ours.size(); ++i) {
            QCOMPARE(imported->parameters[i].first, ours[i].first);
            QCOMPARE(imported->parameters[i].second.scalar_type(), torch::kFloat32);
            // Half-precision files round; the import itself adds no error.
            QVERIFY2(torch::equal(imported->parameters[i].second, ours[i].second.to(dtype).to(torch::kFloat32)),
                ours[i].first.c_str());
        }
    }

    void importRejects_data()
    {
        QTest::addColumn<QString>("variant");
        QTest::addColumn<QString>("code");
        QTest::addColumn<QString>("phrase");
        const QString checkpoint = QStringLiteral("bad_hf_checkpoint");
        QTest::newRow("pickle only") << QStringLiteral("pickle") << checkpoint << QStringLiteral("pytorch_model.bin");
        QTest::newRow("missing tensor") << QStringLiteral("missing") << checkpoint
                                        << QStringLiteral("'transformer.h.1.mlp.c_proj.bias' is missing");
        QTest::newRow("Linear layout") << QStringLiteral("linear") << checkpoint
                                       << QStringLiteral("config.json implies [32, 96]");
        QTest::newRow("untied head") << QStringLiteral("untied") << checkpoint << QStringLiteral("tied LM head");
        QTest::newRow("unknown tensor") << QStringLiteral("unknown") << checkpoint
                                        << QStringLiteral("'score.weight' is not part");
        QTest::newRow("prefix twice") << QStringLiteral("twice") << checkpoint << QStringLiteral("appears twice");
        QTest::newRow("other activation")
            << QStringLiteral("relu") << QStringLiteral("bad_hf_config") << QStringLiteral("activation_function");
        QTest::newRow("no config.json") << QStringLiteral("noconfig") << checkpoint << QStringLiteral("config.json");
        QTest::newRow("corrupt weights") << QStringLiteral("corrupt") << QStringLiteral("safetensors_truncated")
                                         << QStringLiteral("model.safetensors");
    }

    void importRejects()
    {
        QFETCH(QString, variant);
        QFETCH(QString, code);
        QFETCH(QString, phrase);
        const GptConfig config = smallConfig();
        NamedTensors ours = parametersOf(randomModel(config));
        const auto dir = path("bad");
        NamedTensors extra;
        if (variant == QStringLiteral("missing"))
            ours.erase(ours.end() - 3);
        if (variant == QStringLiteral("untied"))
            extra.emplace_back("lm_head.weight", torch::zeros({65, 32}));
        if (variant == QStringLiteral("unknown"))
            extra.emplace_back("score.weight", torch::zeros({2, 32}));
        if (variant == QStringLiteral("twice"))
            extra.emplace_back("wpe.weight", ours[1].second);
        if (variant == QStringLiteral("linear")) {
            // The nn.Linear layout where HF has Conv1D: transposed back here so
            // writeHubFolder's transpose leaves [3d, d] in the file.
            ours[4].second = ours[4].second.t();
        }
        writeHubFolder(dir, config, ours, "transformer.", torch::kFloat32, extra);
        if (variant == QStringLiteral("pickle")) {
            std::filesystem::rename(dir / "model.safetensors", dir / "pytorch_model.bin");
        }
        if (variant == QStringLiteral("relu")) {
            QJsonObject json = readJson(dir / "config.json");
            json.insert(QStringLiteral("activation_function"), QStringLiteral("relu"));
            std::ofstream(dir / "config.json") << QJsonDocument(json).toJson().toStdString();
        }
        if (variant == QStringLiteral("noconfig"))
            std::filesystem::remove(dir / "config.json");
        if (variant == QStringLiteral("corrupt"))
            std::filesystem::resize_file(
                dir / "model.safetensors", std::filesystem::file_size(dir / "model.safetensors") - 1);

        auto imported = importHuggingFaceGpt2(dir);
        QVERIFY(!imported.ok());
        QCOMPARE(QString::fromStdString(imported.error().code), code);
        QVERIFY2(
            imported.error().message.find(phrase.toStdString()) != std::string::npos, imported.error().message.c_str());
    }

private:
    std::filesystem::path path(const std::string& name) const
    {
        return std::filesystem::path(m_dir->path().toStdString()) / name;
    }

    std::unique_ptr<QTemporaryDir> m_dir; // fresh for every test function and row
};

QTEST_GUILESS_MAIN(TestHfGpt2)
#include "tst_hfgpt2.moc"
