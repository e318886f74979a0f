#pragma once

// Shared by the tst_parallel_* suites: Tiny Shakespeare as byte tokens, a
// tiny GPT, and a child mode in which the test binary runs one rank of a
// parallel layout (c10d Gloo on loopback) and writes what it measured.

#include "engine/parallel/parallel_trainer.h"

#include "free_port.h"
#include <QCoreApplication>
#include <QProcess>
#include <QTest>
#include <fstream>
#include <map>

namespace crowdtrain::testing {

using namespace crowdtrain::engine;
using namespace crowdtrain::engine::parallel;

inline const char* const kShakespeare = CROWDTRAIN_SHARED_DATA_DIR "/tinyshakespeare.txt";

// Random windows of Tiny Shakespeare's bytes from a counter-based generator
// (a position fixes the stream), as tst_trainer draws them.
class ShakespeareSource : public BatchSource {
public:
    ShakespeareSource(int64_t blockSize, uint64_t seed)
        : m_blockSize(blockSize)
        , m_seed(seed)
    {
        std::ifstream in(kShakespeare, std::ios::binary);
        if (!in)
            qFatal("cannot read %s", kShakespeare);
        const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        m_tokens.assign(text.begin(), text.end());
        for (unsigned char& token : m_tokens)
            token &= 127;
    }
    void next(int64_t batch, int64_t* x, int64_t* y) override
    {
        for (int64_t row = 0; row < batch; ++row) {
            const uint64_t r = mix(m_seed ^ mix(m_position * 1000003ull + uint64_t(row)));
            const std::size_t start = r % (m_tokens.size() - std::size_t(m_blockSize) - 1);
            for (int64_t i = 0; i < m_blockSize; ++i) {
                x[row * m_blockSize + i] = m_tokens[start + std::size_t(i)];
                y[row * m_blockSize + i] = m_tokens[start + std::size_t(i) + 1];
            }
        }
        ++m_position;
    }
    uint64_t position() const override { return m_position; }
    void setPosition(uint64_t p) override { m_position = p; }
    int64_t blockSize() const override { return m_blockSize; }

private:
    static uint64_t mix(uint64_t z)
    {
        z += 0x9e3779b97f4a7c15ull;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    int64_t m_blockSize;
    uint64_t m_seed;
    uint64_t m_position = 0;
    std::vector<unsigned char> m_tokens;
};

// One rank's run: options as key=value arguments after --parallel-child.
struct ChildSpec {
    std::map<std::string, std::string> values;
    int get(const std::string& key, int fallback) const
    {
        auto found = values.find(key);
        return found == values.end() ? fallback : std::stoi(found->second);
    }
    std::string text(const std::string& key) const
    {
        auto found = values.find(key);
        return found == values.end() ? std::string() : found->second;
    }
};

inline TrainOptions tinyModel(const ChildSpec& spec)
{
    TrainOptions o;
    o.model.nLayer = spec.get("layers", 2);
    o.model.nHead = 4;
    o.model.nEmbd = 64;
    o.model.blockSize = 32;
    o.model.vocabSize = 128;
    o.batchSize = spec.get("batch", 8);
    o.gradAccumulationSteps = spec.get("accum", 1);
    o.maxIters = 100;
    o.schedule = {.learningRate = 3e-3, .minLr = 3e-4, .warmupIters = 2, .lrDecayIters = 100, .decayLr = true};
    o.evalInterval = 0;
    o.device = "cpu";
    return o;
}

// Runs the rank and writes (rank 0 only) an archive: "losses" [steps],
// "grads/<i>" and "params/<i>" in the model's order, "peak_bytes",
// "local_parameters", "bytes_per_step", "bubble", "wait_ms".
inline int runChild(const ChildSpec& spec)
{
    torch::set_num_threads(1);
    const int rank = spec.get("rank", 0), world = spec.get("world", 1);
    std::shared_ptr<Mesh> mesh = Mesh::single();
    if (world > 1) {
        auto created = Mesh::create({.rank = rank,
            .worldSize = world,
            .tensorParallel = spec.get("tp", 1),
            .pipelineParallel = spec.get("pp", 1),
            .port = uint16_t(spec.get("port", 0))});
        if (!created) {
            std::fprintf(stderr, "%s\n", created.error().message.c_str());
            return 3;
        }
        mesh = *created;
    }
    const TrainOptions options = tinyModel(spec);
    TrainData data;
    data.train = std::make_unique<ShakespeareSource>(options.model.blockSize, 1);
    data.val = std::make_unique<ShakespeareSource>(options.model.blockSize, 7);
    ParallelOptions parallel{.zeroStage = spec.get("zero", 0),
        .activationCheckpointing = spec.get("ckpt", 0) != 0,
        .bf16 = spec.get("bf16", 0) != 0};
    auto trainer = ParallelTrainer::create(options, parallel, std::move(data), mesh);
    if (!trainer) {
        std::fprintf(stderr, "%s\n", trainer.error().message.c_str());
        return 4;
    }
    ParallelTrainer& t = **trainer;
    if (!spec.text("resume").empty())
        if (Status loaded = t.loadState(spec.text("resume")); !loaded) {
            std::fprintf(stderr, "%s\n", loaded.error().message.c_str());
            return 5;
        }
    torch::serialize::OutputArchive archive;
    if (spec.get("grads", 0) != 0) {
        int i = 0;
        for (auto& [name, grad] : t.computeGradients())
            archive.write("grads/" + std::to_string(i++), grad);
    }
    const int steps = spec.get("steps", 3);
    std::vector<double> losses;
    double bytes = 0, bubble = 0, waitMs = 0;
    for (int i = 0; i < steps; ++i) {
        const ParallelStepReport r = t.step();
        losses.push_back(r.loss);
        bytes += double(r.bytesSent) / steps;
        bubble = r.bubbleOnPaper;
        waitMs += r.pipelineWaitMs / steps;
    }
    const double valLoss = t.evaluate(*std::make_unique<ShakespeareSource>(options.model.blockSize, 7), 2);
    int i = 0;
    for (auto& [name, value] : t.wholeParameters())
        archive.write("params/" + std::to_string(i++), value);
    if (!spec.text("save").empty())
        if (Status saved = t.saveState(spec.text("save")); !saved) {
            std::fprintf(stderr, "%s\n", saved.error().message.c_str());
            return 6;
        }
    if (!spec.text("export").empty())
        if (Status exported = t.exportHuggingFace(spec.text("export")); !exported) {
            std::fprintf(stderr, "%s\n", exported.error().message.c_str());
            return 7;
        }
    if (rank != 0)
        return 0;
    archive.write("losses", torch::tensor(losses, torch::kDouble));
    archive.write("val_loss", torch::tensor(valLoss, torch::kDouble));
    archive.write("peak_bytes", torch::tensor(t.memory().peak(), torch::kLong));
    archive.write("local_parameters", torch::tensor(t.localParameterCount(), torch::kLong));
    archive.write("bytes_per_step", torch::tensor(bytes, torch::kDouble));
    archive.write("bubble", torch::tensor(bubble, torch::kDouble));
    archive.write("wait_ms", torch::tensor(waitMs, torch::kDouble));
    archive.save_to(spec.text("out"));
    return 0;
}

inline bool isChild(int argc, char** argv)
{
    return argc > 1 && std::string(argv[1]) == "--parallel-child";
}

inline int childMain(int argc, char** argv)
{
    ChildSpec spec;
    for (int i = 2; i < argc; ++i) {
        const std::string arg = argv[i];
        const auto eq = arg.find('=');
        spec.values[arg.substr(0, eq)] = arg.substr(eq + 1);
    }
    return runChild(spec);
}

struct RunResult {
    std::vector<double> losses;
    std::vector<torch::Tensor> grads;
    std::vector<torch::Tensor> params;
    double valLoss = 0;
    int64_t peakBytes = 0;
    int64_t localParameters = 0;
    double bytesPerStep = 0;
    double bubble = 0;
    double waitMs = 0;
};

// Launches `world` ranks of this binary with the arguments (plus rank,
// world, port, out) and reads rank 0's archive. Empty on failure (QVERIFY
// the bool).
inline bool runRanks(int world, const QStringList& arguments, const QString& out, RunResult& result)
{
    const int port = freePort();
    std::vector<std::unique_ptr<QProcess>> processes;
    for (int rank = 0; rank < world; ++rank) {
        auto process = std::make_unique<QProcess>();
        process->setProcessChannelMode(QProcess::ForwardedChannels);
        QStringList args{QStringLiteral("--parallel-child"), QStringLiteral("rank=%1").arg(rank),
            QStringLiteral("world=%1").arg(world), QStringLiteral("port=%1").arg(port), QStringLiteral("out=") + out};
        process->start(QCoreApplication::applicationFilePath(), args + arguments);
        processes.push_back(std::move(process));
    }
    bool ok = true;
    for (auto& p : processes)
        ok = p->waitForFinished(120000) && p->exitStatus() == QProcess::NormalExit && p->exitCode() == 0 && ok;
    if (!ok)
        return false;
    torch::serialize::InputArchive archive;
    archive.load_from(out.toStdString());
    auto read = [&](const std::string& key, torch::Tensor& into) {
        torch::Tensor fresh;
        if (!archive.try_read(key, fresh))
            return false;
        into = fresh.clone();
        return true;
    };
    torch::Tensor t;
    if (!read("losses", t))
        return false;
    for (int64_t i = 0; i < t.numel(); ++i)
        result.losses.push_back(t[i].item<double>());
    for (int i = 0; read("grads/" + std::to_string(i), t); ++i)
        result.grads.push_back(t);
    for (int i = 0; read("params/" + std::to_string(i), t); ++i)
        result.params.push_back(t);
    auto scalar = [&](const char* key) {
        torch::Tensor value;
        return read(key, value) ? value.item<double>() : std::nan("");
    };
    result.valLoss = scalar("val_loss");
    result.peakBytes = int64_t(scalar("peak_bytes"));
    result.localParameters = int64_t(scalar("local_parameters"));
    result.bytesPerStep = scalar("bytes_per_step");
    result.bubble = scalar("bubble");
    result.waitMs = scalar("wait_ms");
    return true;
}

// The largest element-wise difference between two lists of tensors.
inline double maxDifference(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b)
{
    if (a.size() != b.size() || a.empty())
        return std::numeric_limits<double>::infinity();
    double worst = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        if (a[i].sizes() != b[i].sizes())
            return std::numeric_limits<double>::infinity();
        worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>());
    }
    return worst;
}

inline double maxLossDifference(const std::vector<double>& a, const std::vector<double>& b)
{
    if (a.size() != b.size() || a.empty())
        return std::numeric_limits<double>::infinity();
    double worst = 0;
    for (std::size_t i = 0; i < a.size(); ++i)
        worst = std::max(worst, std::abs(a[i] - b[i]));
    return worst;
}

} // namespace crowdtrain::testing
