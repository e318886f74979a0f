#pragma once

// A crowdtrain-worker process joined straight to a test coordinator
// (`join ENDPOINT tiny --server-key ...`, no daemon in between), for the
// multi-process tests.

#include "coordinator_process.h"

#include <QProcess>

namespace crowdtrain::testing {

class WorkerProcess {
public:
    ~WorkerProcess()
    {
        if (m_process.state() != QProcess::NotRunning) {
            m_process.kill();
            m_process.waitForFinished(5000);
        }
    }
    void start(const ServerProcess& server, const std::filesystem::path& data, const std::filesystem::path& home,
        const std::string& name, int maxTasks, const QStringList& extra = {})
    {
        dieWithTheTest(m_process);
        m_process.start(QString::fromStdString(binary("crowdtrain-worker").string()),
            QStringList{QStringLiteral("join"), QString::fromStdString(server.endpoint), QStringLiteral("tiny"),
                QStringLiteral("--server-key"), QString::fromStdString(server.publicKey), QStringLiteral("--data"),
                QString::fromStdString(data.string()), QStringLiteral("--data-dir"),
                QString::fromStdString(home.string()), QStringLiteral("--name"), QString::fromStdString(name),
                QStringLiteral("--threads"), QStringLiteral("1"), QStringLiteral("--max-tasks"),
                QString::number(maxTasks)}
                + extra);
        QVERIFY(m_process.waitForStarted(10000));
    }
    // The worker's JSON summary (its last stdout line) once it has exited.
    nlohmann::json finish(int timeoutMs)
    {
        if (!m_process.waitForFinished(timeoutMs)) {
            qWarning("worker still running; its log: %s", log().right(3000).constData());
            return {};
        }
        const QList<QByteArray> lines = m_process.readAllStandardOutput().trimmed().split('\n');
        auto json = nlohmann::json::parse(lines.isEmpty() ? QByteArray() : lines.last(), nullptr, false);
        if (json.is_discarded()) {
            qWarning("worker log: %s", log().right(3000).constData());
            return {};
        }
        return json;
    }
    bool running() const { return m_process.state() == QProcess::Running; }
    // Everything the worker has logged so far (kept: each call returns it all).
    QByteArray log()
    {
        m_log += m_process.readAllStandardError();
        return m_log;
    }
    void kill()
    {
        m_process.kill();
        m_process.waitForFinished(5000);
    }

private:
    QProcess m_process;
    QByteArray m_log;
};

} // namespace crowdtrain::testing
