#include "ui/daemon_link.h"

#include "net/control/control_client.h"
#include "net/control/control_paths.h"
#include "net/control/event_subscriber.h"

#include <QCoreApplication>
#include <QDateTime>
#include <QDir>
#include <QProcess>
#include <QSocketNotifier>
#include <QStandardPaths>
#include <QTimer>

namespace crowdtrain::ui {
namespace {

// The daemon publishes progress every 500 ms: this long without an event
// means it is gone (or stuck), and a status request decides which.
constexpr qint64 kSilenceMs = 3000;
// Never start daemons faster than this (a daemon that dies at once).
constexpr qint64 kRestartGapMs = 5000;

qint64 nowMs()
{
    return QDateTime::currentMSecsSinceEpoch();
}

} // namespace

DaemonLink::DaemonLink(std::filesystem::path controlDir, QString workerProgram, QObject* parent)
    : QObject(parent)
    , m_dir(std::move(controlDir))
    , m_worker(std::move(workerProgram))
{
    if (m_dir.empty()) {
        auto dir = control::defaultControlDir();
        if (dir)
            m_dir = *dir;
    }
    if (m_worker.isEmpty())
        m_worker = QDir(QCoreApplication::applicationDirPath()).filePath(QStringLiteral("crowdtrain-worker"));
    m_watchdog = new QTimer(this);
    m_watchdog->setInterval(1000);
    connect(m_watchdog, &QTimer::timeout, this, &DaemonLink::watchdog);
}

DaemonLink::~DaemonLink() = default;

void DaemonLink::start()
{
    connectSockets();
    if (!call(QStringLiteral("status"), control::Value::map(), 1000).ok)
        startDaemon();
    m_watchdog->start();
}

void DaemonLink::connectSockets()
{
    delete m_notifier;
    m_notifier = nullptr;
    m_events.reset();
    m_client.reset();
    auto client = control::ControlClient::connect(m_dir);
    if (client)
        m_client = std::move(*client);
    auto events = control::EventSubscriber::connect(m_dir);
    if (!events)
        return;
    m_events = std::move(*events);
    m_notifier = new QSocketNotifier(qintptr(m_events->fd()), QSocketNotifier::Read, this);
    connect(m_notifier, &QSocketNotifier::activated, this, &DaemonLink::drainEvents);
    // Events may be queued already; the notifier is edge-triggered.
    QTimer::singleShot(0, this, &DaemonLink::drainEvents);
}

void DaemonLink::drainEvents()
{
    if (!m_events)
        return;
    while (auto event = m_events->next(0)) {
        m_lastEventMs = nowMs();
        if (!m_attached) {
            m_attached = true;
            emit attachedChanged(true);
        }
        emit this->event(QString::fromStdString(event->type), event->body);
        if (!m_events)
            return; // a handler reconnected
    }
}

DaemonLink::Reply DaemonLink::call(const QString& type, const control::Value& body, int timeoutMs)
{
    Reply reply;
    if (!m_client) {
        // The folder did not exist at connect time (no daemon yet): try again.
        auto client = control::ControlClient::connect(m_dir);
        if (!client) {
            reply.code = QString::fromStdString(client.error().code);
            reply.message = QString::fromStdString(client.error().message);
            return reply;
        }
        m_client = std::move(*client);
    }
    auto result = m_client->call(type.toStdString(), body, timeoutMs);
    if (result) {
        reply.ok = true;
        reply.body = std::move(*result);
        if (!m_attached) {
            m_attached = true;
            m_lastEventMs = nowMs();
            connectSockets();
            emit attachedChanged(true);
        }
        return reply;
    }
    reply.code = QString::fromStdString(result.error().code);
    reply.message = QString::fromStdString(result.error().message);
    if (reply.code == QLatin1String("no_daemon") && m_attached) {
        m_attached = false;
        emit attachedChanged(false);
    }
    return reply;
}

void DaemonLink::watchdog()
{
    if (m_attached && nowMs() - m_lastEventMs < kSilenceMs)
        return;
    const bool wasAttached = m_attached;
    if (call(QStringLiteral("status"), control::Value::map(), 1000).ok) {
        if (!m_events || !wasAttached)
            connectSockets();
        m_lastEventMs = nowMs();
        return;
    }
    if (m_attached) {
        m_attached = false;
        emit attachedChanged(false);
    }
    startDaemon();
}

bool DaemonLink::startDaemon()
{
    if (m_lastStartMs != 0 && nowMs() - m_lastStartMs < kRestartGapMs)
        return false;
    m_lastStartMs = nowMs();
    // The daemon's own output goes to a log file beside its state.
    const QString logDir = QStandardPaths::writableLocation(QStandardPaths::GenericCacheLocation);
    QDir().mkpath(logDir + QStringLiteral("/crowdtrain"));
    QProcess process;
    process.setProgram(m_worker);
    process.setArguments({QStringLiteral("run")});
    process.setStandardOutputFile(logDir + QStringLiteral("/crowdtrain/daemon.log"), QIODevice::Append);
    process.setStandardErrorFile(logDir + QStringLiteral("/crowdtrain/daemon.log"), QIODevice::Append);
    if (!process.startDetached()) {
        emit notice(tr("Could not start the Crowdtrain service (%1).").arg(m_worker));
        return false;
    }
    ++m_started;
    emit notice(m_started == 1 ? tr("Started the Crowdtrain service.")
                               : tr("The Crowdtrain service stopped; started it again."));
    // Reconnect once its sockets exist; the watchdog retries until then.
    QTimer::singleShot(300, this, &DaemonLink::connectSockets);
    return true;
}

} // namespace crowdtrain::ui
