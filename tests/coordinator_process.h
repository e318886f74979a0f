#pragma once

// A real crowdtrain-server process for the multi-process tests: a prepared
// synthetic corpus (tests/synthetic_corpus.h), a project spec, the server started on
// loopback ports it picks itself, its public key and endpoints read from the
// first line it prints.

#include "synthetic_corpus.h"

#include <QProcess>
#include <QTest>

#include <csignal>
#include <sys/prctl.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace crowdtrain::testing {

inline std::filesystem::path binary(const char* name)
{
    return std::filesystem::path(CROWDTRAIN_BIN_DIR) / name;
}

// A child that dies with the test: a qFatal or a crash skips the destructors
// that would stop it, and an orphaned server keeps its ports and folder.
inline void dieWithTheTest(QProcess& process)
{
    process.setChildProcessModifier([] { ::prctl(PR_SET_PDEATHSIG, SIGKILL); });
}

// `corpus` char-level through our own crowdtrain-prepare into dir/data,
// 90/10 split.
inline std::filesystem::path preparedCharData(const std::filesystem::path& dir, const std::filesystem::path& corpus)
{
    const auto data = dir / "data";
    QProcess prepare;
    prepare.start(QString::fromStdString(binary("crowdtrain-prepare").string()),
        {QString::fromStdString(corpus.string()), QStringLiteral("--tokenizer"), QStringLiteral("char"),
            QStringLiteral("--val-fraction"), QStringLiteral("0.1"), QStringLiteral("--out"),
            QString::fromStdString(data.string())});
    if (!prepare.waitForFinished(120000) || prepare.exitCode() != 0)
        qFatal("crowdtrain-prepare failed: %s", prepare.readAllStandardError().constData());
    return data;
}

// A synthetic corpus of about 1 MB (the size of Tiny Shakespeare, with its
// 65 characters), prepared once per test run.
inline std::filesystem::path preparedText(const std::filesystem::path& dir)
{
    if (std::filesystem::exists(dir / "data" / "tokenizer"))
        return dir / "data";
    return preparedCharData(dir, writeSyntheticCorpus(dir / "corpus.txt", 1000000));
}

// Tiny Shakespeare, prepared once per test run: for the suites whose
// figures depend on real text (on the synthetic corpus the outer momentum's
// direction is weak enough that the gate refuses a fresh joiner's first
// tasks: tst_swarm's churn test).
inline std::filesystem::path preparedShakespeare(const std::filesystem::path& dir)
{
    if (std::filesystem::exists(dir / "data" / "tokenizer"))
        return dir / "data";
    const std::filesystem::path corpus = CROWDTRAIN_SHARED_DATA_DIR "/tinyshakespeare.txt";
    if (!std::filesystem::is_regular_file(corpus))
        qFatal("missing input: %s", corpus.c_str());
    return preparedCharData(dir, corpus);
}

struct SpecOptions {
    int64_t innerSteps = 20;
    int64_t batchSize = 8;
    int64_t tasksPerRound = 2;
    int64_t checkpointEvery = 2;
    int64_t deadlineSeconds = 60;
    std::string codec = "int8";
    int64_t embd = 32;
    std::vector<std::string> prompts = {}; // continued at each checkpoint
    std::string checkpointAccess = "everyone";
    // theta_0 imported from this Hugging Face GPT-2 folder instead of built
    // from a seed (joiners then download the state).
    std::filesystem::path importDir = {};
    // "trust": the keys the host vouches for, and the new keys' share (< 0: the default).
    std::vector<std::string> trustedKeys = {};
    double newKeyShare = -1;
    bool calibrate = false; // trust.calibrate: the host trains a task per round
    double evaluateRate = 0; // trust.evaluate.rate: the share of submissions scored on held-out loss
};

// A small model (2 layers, 32 wide, block 32) so that rounds take seconds.
inline std::filesystem::path writeSpec(
    const std::filesystem::path& dir, const std::filesystem::path& data, const SpecOptions& o = {})
{
    const int64_t block = 32;
    nlohmann::json spec = {{"name", "tiny"}, {"description", "test project"},
        {"model", {{"n_layer", 2}, {"n_head", 2}, {"n_embd", o.embd}, {"block_size", block}, {"vocab_size", 65}}},
        {"data", data.string()}, {"init", {{"seed", 7}}},
        {"inner",
            {{"steps", o.innerSteps}, {"batch_size", o.batchSize}, {"learning_rate", 2e-3}, {"min_lr", 2e-4},
                {"warmup_iters", 5}, {"beta1", 0.9}, {"beta2", 0.99}, {"weight_decay", 0.1}, {"grad_clip", 1.0}}},
        {"round",
            {{"token_target", o.tasksPerRound * o.innerSteps * o.batchSize * block},
                {"deadline_seconds", o.deadlineSeconds}}},
        {"codec", o.codec}, {"checkpoints", {{"every_rounds", o.checkpointEvery}, {"keep_last", 3}}},
        {"validation", {{"batches", 8}, {"batch_size", 16}}}};
    if (!o.prompts.empty())
        spec["prompts"] = o.prompts;
    if (!o.importDir.empty())
        spec["init"] = {{"import", o.importDir.string()}};
    spec["checkpoint_access"] = o.checkpointAccess;
    if (!o.trustedKeys.empty() || o.newKeyShare >= 0 || o.calibrate || o.evaluateRate > 0) {
        spec["trust"] = {{"keys", o.trustedKeys}};
        if (o.newKeyShare >= 0)
            spec["trust"]["new_key_share"] = o.newKeyShare;
        if (o.calibrate)
            spec["trust"]["calibrate"] = true;
        if (o.evaluateRate > 0)
            spec["trust"]["evaluate"] = {{"rate", o.evaluateRate}, {"tokens", 2048}};
    }
    std::filesystem::create_directories(dir);
    const auto file = dir / "tiny.project.json";
    std::ofstream(file) << spec.dump(2);
    return file;
}

class ServerProcess {
public:
    ~ServerProcess() { kill(); }

    // Starts the server and waits for its first line; false on failure.
    bool start(const std::filesystem::path& spec, const std::filesystem::path& state, int heartbeatMs = 300,
        const std::string& bind = "tcp://127.0.0.1:*", const QStringList& extraArguments = {})
    {
        m_process.setProcessChannelMode(QProcess::SeparateChannels);
        dieWithTheTest(m_process);
        QStringList arguments{QString::fromStdString(spec.string()), QStringLiteral("--state"),
            QString::fromStdString(state.string()), QStringLiteral("--bind"), QString::fromStdString(bind),
            QStringLiteral("--publish"), QStringLiteral("tcp://127.0.0.1:*"), QStringLiteral("--heartbeat-ms"),
            QString::number(heartbeatMs), QStringLiteral("--threads"), QStringLiteral("1")};
        arguments += extraArguments;
        m_process.start(QString::fromStdString(binary("crowdtrain-server").string()), arguments);
        if (!m_process.waitForStarted(10000))
            return false;
        QByteArray line;
        for (int i = 0; i < 600 && !line.contains('\n'); ++i) {
            m_process.waitForReadyRead(100);
            line += m_process.readAllStandardOutput();
            if (m_process.state() == QProcess::NotRunning)
                break;
        }
        first = nlohmann::json::parse(line.toStdString(), nullptr, false);
        if (first.is_discarded()) {
            qWarning("server said: %s / %s", line.constData(), m_process.readAllStandardError().constData());
            return false;
        }
        publicKey = first.at("public_key").get<std::string>();
        endpoint = first.at("requests").get<std::string>();
        events = first.at("events").get<std::string>();
        swarmPort = first.value("swarm_port", 0);
        return true;
    }

    void kill()
    {
        if (m_process.state() != QProcess::NotRunning) {
            m_process.kill(); // SIGKILL
            m_process.waitForFinished(10000);
        }
    }
    void terminate()
    {
        m_process.terminate();
        if (!m_process.waitForFinished(10000))
            kill();
    }
    QByteArray stderrText() { return m_process.readAllStandardError(); }
    // Before start(): one more variable in the server's environment.
    void setEnvironment(const QString& name, const QString& value)
    {
        QProcessEnvironment environment = QProcessEnvironment::systemEnvironment();
        environment.insert(name, value);
        m_process.setProcessEnvironment(environment);
    }
    // Whether the process has ended (or ends within timeoutMs).
    bool waitForExit(int timeoutMs)
    {
        return m_process.state() == QProcess::NotRunning || m_process.waitForFinished(timeoutMs);
    }
    // Resident memory of the server process (VmRSS), 0 when unknown.
    uint64_t residentBytes() const
    {
        std::ifstream status("/proc/" + std::to_string(m_process.processId()) + "/status");
        std::string line;
        while (std::getline(status, line))
            if (line.rfind("VmRSS:", 0) == 0)
                return std::stoull(line.substr(6)) * 1024;
        return 0;
    }

    std::string publicKey;
    std::string endpoint;
    std::string events;
    int swarmPort = 0;
    nlohmann::json first; // the whole first line

private:
    QProcess m_process;
};

} // namespace crowdtrain::testing
