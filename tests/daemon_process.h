#pragma once

// A crowdtrain-worker run process in temporary XDG folders and a control
// client to it, for the tests of the daemon as a volunteer's machine runs it
// (tst_daemon, tst_daemon_edges).

#include "coordinator_process.h"
#include "core/result.h"
#include "net/control/control_client.h"

#include <QProcess>
#include <QTest>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>

namespace crowdtrain::testing {

using control::Value;

inline bool waitUntil(const std::function<bool()>& done, int timeoutMs)
{
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
    while (std::chrono::steady_clock::now() < deadline) {
        if (done())
            return true;
        QTest::qWait(50); // runs the event loop; the condition is what is waited for
    }
    return done();
}

// One user's folders: data, config, and the private control folder.
struct Home {
    std::filesystem::path root;
    std::filesystem::path data() const { return root / "data"; }
    std::filesystem::path config() const { return root / "config"; }
    std::filesystem::path control() const { return root / "run" / "crowdtrain"; }
};

class DaemonProcess {
public:
    ~DaemonProcess() { kill(); }

    void start(const Home& home)
    {
        std::filesystem::create_directories(home.root / "run");
        // Its log goes to a file: a pipe the test reads only now and then
        // would fill up and block the daemon's writes.
        m_logFile = home.root / ("daemon-" + std::to_string(++s_started) + ".log");
        m_process.setStandardErrorFile(QString::fromStdString(m_logFile.string()));
        m_process.setStandardOutputFile(QProcess::nullDevice());
        dieWithTheTest(m_process);
        m_process.start(QString::fromStdString(binary("crowdtrain-worker").string()),
            {QStringLiteral("run"), QStringLiteral("--data-dir"), QString::fromStdString(home.data().string()),
                QStringLiteral("--config-dir"), QString::fromStdString(home.config().string()),
                QStringLiteral("--control-dir"), QString::fromStdString(home.control().string())});
        QVERIFY(m_process.waitForStarted(10000));
    }
    bool waitForExit(int timeoutMs) { return m_process.waitForFinished(timeoutMs); }
    int exitCode() const { return m_process.exitCode(); }
    bool exitedNormally() const { return m_process.exitStatus() == QProcess::NormalExit; }
    bool running() const { return m_process.state() == QProcess::Running; }
    QByteArray log()
    {
        std::ifstream file(m_logFile);
        return QByteArray::fromStdString(std::string(std::istreambuf_iterator<char>(file), {}));
    }
    void kill()
    {
        if (m_process.state() != QProcess::NotRunning) {
            m_process.kill();
            m_process.waitForFinished(10000);
        }
    }
    void terminate()
    {
        m_process.terminate();
        // Generous: a daemon under a loaded CI machine may be mid-step.
        if (!m_process.waitForFinished(90000))
            kill();
    }

private:
    static inline int s_started = 0;
    QProcess m_process;
    std::filesystem::path m_logFile;
};

// A client once the daemon answers.
inline std::unique_ptr<control::ControlClient> connectTo(const Home& home, DaemonProcess& daemon)
{
    std::unique_ptr<control::ControlClient> client;
    waitUntil(
        [&] {
            if (!client)
                if (auto c = control::ControlClient::connect(home.control()))
                    client = std::move(*c);
            return client && client->call("status", Value::map(), 1000).ok();
        },
        60000);
    if (!client)
        qFatal("the daemon did not answer: %s", daemon.log().constData());
    return client;
}

// A settings_set body.
inline Value keyValue(const std::string& key, Value value)
{
    Value body = Value::map();
    body.set("key", key).set("value", std::move(value));
    return body;
}

inline Value call(control::ControlClient& client, const std::string& type, const Value& body = Value::map())
{
    auto reply = client.call(type, body, 30000);
    if (!reply)
        qFatal("%s: %s (%s)", type.c_str(), reply.error().message.c_str(), reply.error().code.c_str());
    return *reply;
}

inline Error refusal(control::ControlClient& client, const std::string& type, const Value& body)
{
    auto reply = client.call(type, body, 30000);
    if (reply)
        qFatal("%s was accepted: %s", type.c_str(), reply->toJson().c_str());
    return reply.error();
}

} // namespace crowdtrain::testing
