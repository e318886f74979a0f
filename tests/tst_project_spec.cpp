// Project spec files: a good spec with defaults, every bad field named in
// its error, the data folder checks, and the shipped example.
#include "coordinator_fixtures.h"
#include "synthetic_corpus.h"

#include "net/coordinator/project_spec.h"

#include "engine/data_prepare.h"

#include <nlohmann/json.hpp>

#include <QTemporaryDir>
#include <QTest>

using namespace crowdtrain;
using namespace crowdtrain::coordinator;
using nlohmann::json;

namespace {

json goodSpec()
{
    return json::parse(R"({
        "name": "tiny-demo",
        "description": "a test project",
        "model": {"preset": "tiny"},
        "data": "data",
        "init": {"seed": 7},
        "inner": {"steps": 2, "batch_size": 2, "learning_rate": 1e-3, "min_lr": 1e-4, "warmup_iters": 1},
        "outer": {"lr": 0.5, "momentum": 0.8, "nesterov": false},
        "round": {"token_target": 1000, "deadline_seconds": 60},
        "codec": "fp16",
        "checkpoints": {"every_rounds": 3, "keep_last": 2, "milestone_every": 10},
        "validation": {"batches": 2, "batch_size": 2}
    })");
}

} // namespace

class TestProjectSpec : public QObject {
    Q_OBJECT

private:
    QTemporaryDir m_dir;
    std::filesystem::path m_root;

    std::filesystem::path writeSpec(const json& spec, const std::string& name = "project.json") const
    {
        const auto file = m_root / name;
        testing::writeAll(file, spec.dump(2));
        return file;
    }

private slots:
    void initTestCase()
    {
        QVERIFY(m_dir.isValid());
        m_root = m_dir.path().toStdString();
        testing::makeDataFolder(m_root / "data", 20, {1000, 300});
    }

    void goodSpecParsesWithValues()
    {
        const auto file = writeSpec(goodSpec());
        auto spec = loadProjectSpec(file);
        QVERIFY2(spec.ok(), spec.ok() ? "" : spec.error().message.c_str());
        QCOMPARE(spec->name, std::string("tiny-demo"));
        QCOMPARE(spec->description, std::string("a test project"));
        QCOMPARE(spec->modelPreset, std::string("tiny"));
        QCOMPARE(spec->model, *engine::gptConfigByName("tiny"));
        QCOMPARE(spec->dataDir, m_root / "data"); // relative to the spec's folder
        QCOMPARE(spec->init.seed, uint64_t(7));
        QVERIFY(!spec->init.importDir);
        QCOMPARE(spec->inner.steps, int64_t(2));
        QCOMPARE(spec->inner.learningRate, 1e-3);
        QCOMPARE(spec->inner.warmupIters, int64_t(1));
        QCOMPARE(spec->inner.beta2, 0.95); // default
        QCOMPARE(spec->outer.lr, 0.5);
        QCOMPARE(spec->outer.momentum, 0.8);
        QCOMPARE(spec->outer.nesterov, false);
        QCOMPARE(spec->round.tokenTarget, uint64_t(1000));
        QCOMPARE(spec->round.deadlineSeconds, int64_t(60));
        QCOMPARE(spec->codec, Codec::Fp16);
        QCOMPARE(spec->checkpoints.keepLast, int64_t(2));
        QCOMPARE(spec->validation.batches, int64_t(2));
        QCOMPARE(spec->tokensPerTask(), uint64_t(2 * 2 * 32 + 1));
    }

    void minimalSpecTakesDefaults()
    {
        const json minimal = {{"name", "m"},
            {"model", {{"n_layer", 1}, {"n_head", 2}, {"n_embd", 8}, {"block_size", 16}, {"vocab_size", 20}}},
            {"data", "data"}, {"inner", {{"steps", 1}, {"batch_size", 1}}}};
        auto spec = loadProjectSpec(writeSpec(minimal, "minimal.json"));
        QVERIFY2(spec.ok(), spec.ok() ? "" : spec.error().message.c_str());
        QCOMPARE(spec->model.nEmbd, int64_t(8));
        QVERIFY(spec->modelPreset.empty());
        QCOMPARE(spec->codec, Codec::Int8);
        QCOMPARE(spec->outer.lr, 0.7);
        QCOMPARE(spec->outer.momentum, 0.8);
        QCOMPARE(spec->outer.nesterov, true);
        QCOMPARE(spec->roundTokenTarget(), spec->tokensPerTask()); // token_target 0: one task
        QCOMPARE(spec->init.seed, uint64_t(1337));
    }

    void badField_data()
    {
        QTest::addColumn<QString>("patch"); // JSON merge patch applied to the good spec
        QTest::addColumn<QString>("expected"); // must appear in the error
        auto row = [](const char* name, const char* patch, const char* expected) {
            QTest::newRow(name) << QString::fromUtf8(patch) << QString::fromUtf8(expected);
        };
        row("name missing", R"({"name": null})", "name: is required");
        row("name not a slug", R"({"name": "Tiny Demo"})", "name: must be 1 to 64");
        row("name too long", R"({"name": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"})",
            "name: must be 1 to 64");
        row("description not text", R"({"description": 3})", "description: must be a string");
        row("model missing", R"({"model": null})", "model: is required");
        row("unknown preset", R"({"model": {"preset": "gpt5"}})", "model.preset: unknown model config");
        row("custom size incomplete", R"({"model": {"preset": null, "n_layer": 2}})", "model.n_head: is required");
        row("heads do not divide", R"({"model": {"n_head": 3}})", "model: n_embd (32) must be divisible");
        row("vocab too large", R"({"model": {"vocab_size": 70000}})", "model.vocab_size: must be in");
        row("layers not integer", R"({"model": {"n_layer": 2.5}})", "model.n_layer: must be an integer");
        row("data missing", R"({"data": null})", "data: is required");
        row("seed and import", R"({"init": {"import": "hf"}})", "init: give either seed or import");
        row("negative seed", R"({"init": {"seed": -1}})", "init.seed: must be in");
        row("zero inner steps", R"({"inner": {"steps": 0}})", "inner.steps: must be in [1");
        row("batch as text", R"({"inner": {"batch_size": "8"}})", "inner.batch_size: must be an integer");
        row("zero learning rate", R"({"inner": {"learning_rate": 0}})", "inner.learning_rate: must be in (0");
        row("min_lr above lr", R"({"inner": {"min_lr": 0.1}})", "inner.min_lr: must not exceed");
        row("beta1 of 1", R"({"inner": {"beta1": 1.0}})", "inner.beta1: must be in");
        row("negative clip", R"({"inner": {"grad_clip": -1}})", "inner.grad_clip: must be in");
        row("misspelt inner field", R"({"inner": {"stpes": 3}})", "inner.stpes: unknown field");
        row("outer momentum 1.5", R"({"outer": {"momentum": 1.5}})", "outer.momentum: must be in");
        row("nesterov as text", R"({"outer": {"nesterov": "yes"}})", "outer.nesterov: must be true or false");
        row("deadline zero", R"({"round": {"deadline_seconds": 0}})", "round.deadline_seconds: must be in");
        row("token target negative", R"({"round": {"token_target": -5}})", "round.token_target: must be in");
        row("codec int4", R"({"codec": "int4"})", "codec: must be \"int8\", \"fp16\", \"fp32\" or \"sparse\"");
        row("sparse without its codec", R"({"sparse": {"k": 8}})", "sparse: is only for");
        row("sparse union with momentum", R"({"codec": "sparse"})",
            "outer.momentum: must be 0 with the sparse codec's union update");
        row("sparse down_k above chunk", R"({"codec": "sparse", "sparse": {"chunk": 64, "k": 8, "down_k": 65}})",
            "sparse.down_k: must not exceed chunk");
        row("sparse chunk not a power of two",
            R"({"codec": "sparse", "outer": {"momentum": 0}, "sparse": {"chunk": 100}})",
            "sparse: sparse codec: chunk must be a power of two");
        row("sparse k above chunk",
            R"({"codec": "sparse", "outer": {"momentum": 0}, "sparse": {"chunk": 64, "k": 65}})",
            "sparse: sparse codec: k must be in");
        row("sparse decay", R"({"codec": "sparse", "outer": {"momentum": 0}, "sparse": {"decay": 1.5}})",
            "sparse.decay: must be in");
        row("sparse update bits", R"({"codec": "sparse", "outer": {"momentum": 0}, "sparse": {"update_bits": 6}})",
            "sparse: sparse codec: update bits must be 4 or 8");
        row("sparse unknown field", R"({"codec": "sparse", "outer": {"momentum": 0}, "sparse": {"topk": 3}})",
            "sparse.topk: unknown field");
        row("keep none", R"({"checkpoints": {"keep_last": 0}})", "checkpoints.keep_last: must be in");
        row("validation batch", R"({"validation": {"batch_size": -1}})", "validation.batch_size: must be in");
        row("section not object", R"({"outer": 3})", "outer: must be an object");
        row("unknown top field", R"({"optimizer": {}})", "optimizer: unknown field");
        row("trusted key too short", R"({"trust": {"keys": ["abc"]}})", "trust.keys: each key must be a Z85");
        row("trusted key not Z85", R"({"trust": {"keys": ["aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa,,"]}})",
            "trust.keys: each key must be a Z85");
        row("new key share above 1", R"({"trust": {"new_key_share": 1.5}})", "trust.new_key_share: must be in");
        row("trust unknown field", R"({"trust": {"vouch": []}})", "trust.vouch: unknown field");
        row("calibrate not a boolean", R"({"trust": {"calibrate": 1}})", "trust.calibrate: must be true or false");
        row("defences not a boolean", R"({"trust": {"defences": "off"}})", "trust.defences: must be true or false");
        row("evaluate rate above 1", R"({"trust": {"evaluate": {"rate": 2}}})", "trust.evaluate.rate: must be in");
        row("evaluate no tokens", R"({"trust": {"evaluate": {"tokens": 0}}})", "trust.evaluate.tokens: must be in");
        row("evaluate unknown field", R"({"trust": {"evaluate": {"share": 1}}})",
            "trust.evaluate.share: unknown field");
    }

    void trustedKeys()
    {
        json spec = goodSpec();
        spec["trust"] = {{"keys", {"rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"}}, {"new_key_share", 0.1},
            {"calibrate", true}, {"defences", false}, {"evaluate", {{"rate", 0.5}, {"tokens", 2048}}}};
        auto parsed = loadProjectSpec(writeSpec(spec, "trust.json"));
        QVERIFY2(parsed, parsed ? "" : parsed.error().message.c_str());
        QCOMPARE(parsed->trust.keys, std::vector<std::string>{"rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"});
        QCOMPARE(parsed->trust.newKeyShare, 0.1);
        QVERIFY(parsed->trust.calibrate);
        QVERIFY(!parsed->trust.defences);
        QCOMPARE(parsed->trust.evaluateRate, 0.5);
        QCOMPARE(parsed->trust.evaluateTokens, int64_t(2048));
        auto plain = loadProjectSpec(writeSpec(goodSpec(), "plain.json"));
        QVERIFY(plain);
        QVERIFY(plain->trust.keys.empty());
        QCOMPARE(plain->trust.newKeyShare, 0.25);
        QVERIFY(!plain->trust.calibrate);
        QVERIFY(plain->trust.defences);
        QCOMPARE(plain->trust.evaluateRate, 0.0); // not scored unless the host asks
    }

    void badField()
    {
        QFETCH(QString, patch);
        QFETCH(QString, expected);
        json spec = goodSpec();
        spec.merge_patch(json::parse(patch.toStdString()));
        const auto file = writeSpec(spec, "bad.json");
        auto parsed = loadProjectSpec(file);
        QVERIFY(!parsed.ok());
        QCOMPARE(parsed.error().code, std::string("bad_spec"));
        const QString message = QString::fromStdString(parsed.error().message);
        QVERIFY2(message.contains(expected), qPrintable(message));
        QVERIFY2(message.startsWith(QString::fromStdString(file.string()) + QStringLiteral(": ")), qPrintable(message));
    }

    void notJson()
    {
        auto parsed = parseProjectSpec("{\"name\": ", m_root / "broken.json");
        QVERIFY(!parsed.ok());
        QVERIFY(parsed.error().message.find("broken.json: not valid JSON") != std::string::npos);
        QVERIFY(!parseProjectSpec("[1, 2]", m_root / "array.json").ok());
        QVERIFY(!loadProjectSpec(m_root / "missing.json").ok());
    }

    void dataChecks_data()
    {
        QTest::addColumn<QString>("patch");
        QTest::addColumn<QString>("expected");
        QTest::newRow("no such folder") << QStringLiteral(R"({"data": "nowhere"})") << QStringLiteral("data: ");
        QTest::newRow("vocab smaller than tokenizer") << QStringLiteral(
            R"({"model": {"vocab_size": 10}})") << QStringLiteral("model.vocab_size: 10 is smaller than the 20 tokens");
        QTest::newRow("task larger than any shard") << QStringLiteral(R"({"inner": {"steps": 100}})")
                                                    << QStringLiteral("inner: a task needs 50 pieces of 129 tokens");
        QTest::newRow("import folder without config")
            << QStringLiteral(R"({"init": {"seed": null, "import": "data"}})") << QStringLiteral("init.import: ");
    }

    void dataChecks()
    {
        QFETCH(QString, patch);
        QFETCH(QString, expected);
        json spec = goodSpec();
        spec.merge_patch(json::parse(patch.toStdString()));
        const auto file = writeSpec(spec, "data-check.json");
        QVERIFY(parseProjectSpec(testing::readAll(file), file).ok()); // the fields themselves are fine
        auto parsed = loadProjectSpec(file);
        QVERIFY(!parsed.ok());
        const QString message = QString::fromStdString(parsed.error().message);
        QVERIFY2(message.contains(expected), qPrintable(message));
    }

    void importFolderMustMatchModel()
    {
        const auto hf = m_root / "hf";
        std::filesystem::create_directories(hf);
        testing::writeAll(hf / "config.json",
            R"({"model_type": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 32, "n_positions": 32, "vocab_size": 65})");
        json spec = goodSpec();
        spec["init"] = {{"import", "hf"}};
        auto parsed = loadProjectSpec(writeSpec(spec, "import.json"));
        QVERIFY2(parsed.ok(), parsed.ok() ? "" : parsed.error().message.c_str());
        QCOMPARE(*parsed->init.importDir, hf);

        spec["model"] = {{"preset", "tiny"}, {"n_layer", 1}};
        parsed = loadProjectSpec(writeSpec(spec, "import.json"));
        QVERIFY(!parsed.ok());
        QVERIFY2(parsed.error().message.find("describes another model") != std::string::npos,
            parsed.error().message.c_str());
    }

    // A project that names no trusted key and neither calibrates nor
    // evaluates is open to a first-round Sybil take-over (issue 42, row B):
    // unprotected() says why and what to set; any of the three protects it.
    void aProjectNothingProtectsSaysSo()
    {
        json spec = goodSpec();
        auto parsed = parseProjectSpec(spec.dump(), m_root / "trust.json");
        QVERIFY(parsed.ok());
        const std::string why = parsed->trust.unprotected();
        QVERIFY2(why.find("trust.keys") != std::string::npos && why.find("trust.calibrate") != std::string::npos,
            why.c_str());
        for (const json& trust :
            {json{{"keys", {std::string(40, 'a')}}}, json{{"calibrate", true}}, json{{"evaluate", {{"rate", 0.1}}}}}) {
            spec["trust"] = trust;
            parsed = parseProjectSpec(spec.dump(), m_root / "trust.json");
            QVERIFY2(parsed.ok(), parsed.ok() ? "" : parsed.error().message.c_str());
            QVERIFY2(parsed->trust.unprotected().empty(), trust.dump().c_str());
        }
        spec["trust"] = {{"calibrate", true}, {"defences", false}};
        parsed = parseProjectSpec(spec.dump(), m_root / "trust.json");
        QVERIFY(parsed.ok());
        QVERIFY(parsed->trust.unprotected().find("defences are off") != std::string::npos);
    }

    // A sparse project that does not evaluate lets "flat" updates through
    // whatever else it sets (issue 42, session 31's sparse flat row):
    // unprotected() says so and names trust.evaluate; evaluating protects it.
    void aSparseProjectThatDoesNotEvaluateSaysSo()
    {
        json spec = goodSpec();
        spec["codec"] = "sparse";
        spec["outer"] = {{"momentum", 0}};
        spec["trust"] = {{"calibrate", true}, {"keys", {std::string(40, 'a')}}};
        auto parsed = parseProjectSpec(spec.dump(), m_root / "sparse-trust.json");
        QVERIFY2(parsed.ok(), parsed.ok() ? "" : parsed.error().message.c_str());
        QVERIFY(parsed->trust.unprotected().empty());
        const std::string why = parsed->unprotected();
        QVERIFY2(why.find("flat") != std::string::npos && why.find("trust.evaluate") != std::string::npos, why.c_str());
        spec["trust"]["evaluate"] = {{"rate", 1}};
        parsed = parseProjectSpec(spec.dump(), m_root / "sparse-trust.json");
        QVERIFY(parsed.ok());
        QVERIFY2(parsed->unprotected().empty(), parsed->unprotected().c_str());
        // int8 has its direction check: calibrating is enough.
        spec = goodSpec();
        spec["trust"] = {{"calibrate", true}};
        parsed = parseProjectSpec(spec.dump(), m_root / "sparse-trust.json");
        QVERIFY(parsed.ok());
        QVERIFY2(parsed->unprotected().empty(), parsed->unprotected().c_str());
    }

    // "codec": "sparse" with its parameters; its outer step is plain SGD
    // (momentum 0; lr 4 with the union update, 1 with down_k, unless given).
    void sparseCodec()
    {
        json spec = goodSpec();
        spec["codec"] = "sparse";
        spec["sparse"] = {{"chunk", 1024}, {"k", 16}, {"decay", 0.9}, {"update_bits", 8}};
        spec["outer"] = {{"momentum", 0}};
        auto parsed = parseProjectSpec(spec.dump(), m_root / "sparse.json");
        QVERIFY2(parsed.ok(), parsed.ok() ? "" : parsed.error().message.c_str());
        QCOMPARE(parsed->codec, Codec::Sparse);
        QCOMPARE(parsed->sparse.chunk, int64_t(1024));
        QCOMPARE(parsed->sparse.k, int64_t(16));
        QCOMPARE(parsed->sparse.decay, 0.9);
        QCOMPARE(parsed->sparse.updateBits, 8);
        QCOMPARE(parsed->sparseDownK, int64_t(0));
        QCOMPARE(parsed->outer.momentum, 0.0);
        QCOMPARE(parsed->outer.lr, 4.0);
        spec.erase("sparse");
        spec.erase("outer");
        parsed = parseProjectSpec(spec.dump(), m_root / "sparse.json");
        QVERIFY(parsed.ok());
        QCOMPARE(parsed->sparse.chunk, int64_t(4096));
        QCOMPARE(parsed->sparse.k, int64_t(64));
        QCOMPARE(parsed->sparse.decay, 0.8);
        QCOMPARE(parsed->sparse.updateBits, 4);
        QCOMPARE(parsed->sparseDownK, int64_t(0)); // the union by default
        QCOMPARE(parsed->outer.momentum, 0.0);
        // The coordinator's re-sparsified update allows outer momentum.
        spec["sparse"] = {{"k", 32}, {"down_k", 128}};
        spec["outer"] = {{"momentum", 0.5}};
        parsed = parseProjectSpec(spec.dump(), m_root / "sparse.json");
        QVERIFY2(parsed.ok(), parsed.ok() ? "" : parsed.error().message.c_str());
        QCOMPARE(parsed->sparseDownK, int64_t(128));
        QCOMPARE(parsed->outer.momentum, 0.5);
        QCOMPARE(parsed->outer.lr, 1.0);
    }

    void codecNames()
    {
        for (Codec codec : {Codec::Int8, Codec::Fp16, Codec::Fp32, Codec::Sparse})
            QCOMPARE(*diloco::parseCodec(diloco::codecName(codec)), codec);
        QVERIFY(!diloco::parseCodec("INT8"));
    }

    // The shipped example is a valid spec (its data folder is prepared by
    // the user, so only the fields are checked here).
    void exampleSpecParses()
    {
        const std::filesystem::path file = CROWDTRAIN_SOURCE_DIR "/docs/examples/tiny-shakespeare.project.json";
        auto text = testing::readAll(file);
        QVERIFY(!text.empty());
        auto spec = parseProjectSpec(text, file);
        QVERIFY2(spec.ok(), spec.ok() ? "" : spec.error().message.c_str());
        QCOMPARE(spec->name, std::string("tiny-shakespeare"));
        QCOMPARE(spec->model.vocabSize, int64_t(65));
        QCOMPARE(spec->dataDir, file.parent_path() / "data" / "tinyshakespeare-char");
        QCOMPARE(spec->inner.lrDecayIters, int64_t(20000));
        QVERIFY(spec->round.wrapUp); // the default
        // 800 windows per task: 64 pieces of 13 windows would hold 832; 62 hold 806.
        QCOMPARE(spec->windowsPerPiece(), uint64_t(13));
        QCOMPARE(spec->piecesPerTask(), uint32_t(62));
        QCOMPARE(spec->tokensPerPiece(), uint64_t(13 * 128 + 1));
        json noWrapUp = json::parse(text);
        noWrapUp["round"]["wrap_up"] = false;
        noWrapUp["inner"]["lr_decay_iters"] = -1;
        QVERIFY(!parseProjectSpec(noWrapUp.dump(), file).ok()); // a negative horizon
        noWrapUp["inner"]["lr_decay_iters"] = 0;
        auto strict = parseProjectSpec(noWrapUp.dump(), file);
        QVERIFY(strict.ok());
        QVERIFY(!strict->round.wrapUp);
    }

    // ... and with a char-level data set prepared where its README says (a
    // synthetic corpus with Tiny Shakespeare's 65 characters), it loads.
    void exampleSpecLoadsWithPreparedData()
    {
        const std::filesystem::path corpus = testing::writeSyntheticCorpus(m_root / "corpus.txt", 200000);
        const std::filesystem::path example = CROWDTRAIN_SOURCE_DIR "/docs/examples/tiny-shakespeare.project.json";
        const auto dir = m_root / "example";
        std::filesystem::create_directories(dir / "data");
        std::filesystem::copy_file(example, dir / example.filename());
        engine::PrepareOptions options;
        options.inputs = {corpus};
        options.outDir = dir / "data" / "tinyshakespeare-char";
        options.tokenizer = "char";
        QVERIFY(engine::prepareDataSet(options).ok());
        auto spec = loadProjectSpec(dir / example.filename());
        QVERIFY2(spec.ok(), spec.ok() ? "" : spec.error().message.c_str());
        QCOMPARE(spec->tokensPerTask(), uint64_t(50 * 16 * 128 + 1));
    }
};

QTEST_GUILESS_MAIN(TestProjectSpec)
#include "tst_project_spec.moc"
