#include "ui/daemon_link.h"

#include "net/control/control_client.h"
#include "net/control/control_paths.h"
#include "net/control/control_protocol.h"
#include "net/control/event_subscriber.h"
#include "ui/format.h"

#include <QCoreApplication>
#include <QDateTime>
#include <QDir>
#include <QLocale>
#include <QPointer>
#include <QProcess>
#include <QSocketNotifier>
#include <QStandardPaths>
#include <QTimer>

#include <csignal>

namespace crowdtrain::ui {
namespace {

// The daemon publishes progress every 500 ms: this long without an event
// means it is gone (or stuck), and a status request decides which.
constexpr qint64 kSilenceMs = 3000;
// How long the watchdog's status request may take.
constexpr int kPingTimeoutMs = 2000;
// Never start daemons faster than this (a daemon that dies at once).
constexpr qint64 kRestartGapMs = 5000;
// ZeroMQ's descriptor is edge-triggered and an edge can be taken by an
// operation on the socket (a send) before the notifier sees it; while
// replies are awaited the socket is also read this often, so that a lost
// edge delays a reply by at most this much instead of its whole timeout.
constexpr int kBackstopMs = 100;

qint64 nowMs()
{
    return QDateTime::currentMSecsSinceEpoch();
}

DaemonReply failure(const Error& error)
{
    DaemonReply reply;
    reply.code = QString::fromStdString(error.code);
    reply.message = QString::fromStdString(error.message);
    return reply;
}

} // namespace

DaemonRequest::DaemonRequest(const QString& type, QObject* parent)
    : QObject(parent)
    , m_type(type)
    , m_timeout(new QTimer(this))
{
    m_timeout->setSingleShot(true);
}

void DaemonRequest::finish(DaemonReply reply)
{
    if (m_finished)
        return;
    m_finished = true;
    m_timeout->stop();
    m_reply = std::move(reply);
    emit finished(m_reply);
    deleteLater();
}

DaemonLink::DaemonLink(std::filesystem::path controlDir, QString workerProgram, QObject* parent)
    : Link(parent)
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
    m_backstop = new QTimer(this);
    m_backstop->setInterval(kBackstopMs);
    connect(m_backstop, &QTimer::timeout, this, &DaemonLink::drainReplies);
}

DaemonLink::~DaemonLink()
{
    // Jobs still in flight die with the link, unanswered: their receivers
    // are going away too.
    for (auto& [id, request] : m_requests)
        request->disconnect();
    delete m_replyNotifier;
    delete m_eventNotifier;
}

void DaemonLink::start()
{
    ensureClient();
    connectEvents();
    watchdog();
    m_watchdog->start();
}

bool DaemonLink::ensureClient()
{
    if (m_client)
        return true;
    // The folder exists only once a daemon made it: until then this fails
    // (no_daemon) and is tried again by the next request.
    auto client = control::ControlClient::connect(m_dir);
    if (!client)
        return false;
    m_client = std::move(*client);
    watchRequests();
    return true;
}

void DaemonLink::watchRequests()
{
    if (m_replyNotifier && m_replyFdGeneration == m_client->fdGeneration())
        return;
    // A reopened socket (Lazy Pirate) has a new descriptor. The old
    // notifier may be the one whose signal runs now: retired, not deleted.
    retire(m_replyNotifier);
    m_replyFdGeneration = m_client->fdGeneration();
    m_replyNotifier = new QSocketNotifier(qintptr(m_client->fd()), QSocketNotifier::Read, this);
    connect(m_replyNotifier, &QSocketNotifier::activated, this, &DaemonLink::drainReplies);
    // Edge-triggered: whatever is queued already would never signal.
    scheduleDrain();
}

void DaemonLink::retire(QSocketNotifier*& notifier)
{
    if (!notifier)
        return;
    notifier->setEnabled(false);
    notifier->disconnect(this);
    notifier->deleteLater();
    notifier = nullptr;
}

DaemonRequest* DaemonLink::request(const QString& type, const control::Value& body, int timeoutMs)
{
    auto* job = new DaemonRequest(type, this);
    // The timeout counts from now, waiting for a turn included.
    connect(job->m_timeout, &QTimer::timeout, this, [this, job, timeoutMs] { timedOut(job, timeoutMs); });
    job->m_timeout->start(std::max(timeoutMs, 0));
    if (m_requests.size() >= std::size_t(control::kReplyQueueLength) || !m_waiting.empty())
        m_waiting.push_back({job, body});
    else
        send(job, body, true);
    return job;
}

void DaemonLink::send(DaemonRequest* job, const control::Value& body, bool inRequest)
{
    // Inside request() the caller has not connected to the job yet: a
    // failure is reported from the event loop.
    auto fail = [job, inRequest](DaemonReply reply) {
        if (!inRequest)
            return job->finish(std::move(reply));
        QTimer::singleShot(0, job, [job, reply = std::move(reply)]() mutable { job->finish(std::move(reply)); });
    };
    if (!ensureClient()) {
        DaemonReply reply;
        reply.code = qname(control::errc::kNoDaemon);
        reply.message = tr("The Crowdtrain service is not running yet.");
        fail(std::move(reply));
        return;
    }
    auto sent = m_client->send(job->type().toStdString(), body);
    watchRequests();
    if (!sent) {
        fail(failure(sent.error()));
        return;
    }
    job->m_id = *sent;
    m_requests[job->m_id] = job;
    if (!m_backstop->isActive())
        m_backstop->start();
    // A send may take the descriptor's edge: look for replies.
    scheduleDrain();
}

void DaemonLink::sendWaiting()
{
    while (!m_waiting.empty() && m_requests.size() < std::size_t(control::kReplyQueueLength)) {
        Waiting next = std::move(m_waiting.front());
        m_waiting.pop_front();
        if (next.job && !next.job->isFinished())
            send(next.job, next.body, false);
    }
}

void DaemonLink::request(const QString& type, const control::Value& body, QObject* context, Handler done, int timeoutMs)
{
    DaemonRequest* job = request(type, body, timeoutMs);
    connect(job, &DaemonRequest::finished, context, std::move(done));
}

void DaemonLink::scheduleDrain()
{
    if (m_drainScheduled)
        return;
    m_drainScheduled = true;
    QTimer::singleShot(0, this, &DaemonLink::drainReplies);
}

void DaemonLink::drainReplies()
{
    m_drainScheduled = false;
    if (!m_client)
        return;
    auto replies = m_client->takeReplies();
    watchRequests();
    for (control::Reply& r : replies) {
        auto it = m_requests.find(r.id);
        if (it == m_requests.end())
            continue;
        DaemonRequest* job = it->second;
        m_requests.erase(it);
        DaemonReply reply;
        if (r.type != job->type().toStdString()) {
            reply.code = qname(control::errc::kMalformed);
            reply.message = tr("The service answered a \"%1\" request as \"%2\".")
                                .arg(job->type(), QString::fromStdString(r.type));
        } else if (r.ok) {
            reply.ok = true;
            reply.body = std::move(r.body);
        } else {
            reply = failure(r.error);
        }
        if (reply.ok && !m_attached) {
            m_lastEventMs = nowMs();
            setAttached(true);
        }
        job->finish(std::move(reply));
    }
    sendWaiting();
    if (m_requests.empty())
        m_backstop->stop();
}

void DaemonLink::timedOut(DaemonRequest* job, int timeoutMs)
{
    if (job->id() != 0) {
        m_requests.erase(job->id());
        if (m_client) {
            m_client->abandon(job->id());
            watchRequests();
        }
    } else {
        std::erase_if(m_waiting, [job](const Waiting& w) { return w.job == job; });
    }
    DaemonReply reply;
    reply.code = qname(control::errc::kNoDaemon);
    reply.message = tr("The Crowdtrain service did not answer \"%1\" within %2 s.")
                        .arg(job->type())
                        .arg(QLocale().toString(timeoutMs / 1000.0, 'g', 3));
    job->finish(std::move(reply));
    sendWaiting();
    if (m_requests.empty())
        m_backstop->stop();
}

void DaemonLink::connectEvents()
{
    retire(m_eventNotifier);
    m_events.reset();
    auto events = control::EventSubscriber::connect(m_dir);
    if (!events)
        return;
    m_events = std::move(*events);
    m_eventNotifier = new QSocketNotifier(qintptr(m_events->fd()), QSocketNotifier::Read, this);
    connect(m_eventNotifier, &QSocketNotifier::activated, this, &DaemonLink::drainEvents);
    // Events may be queued already; the notifier is edge-triggered.
    QTimer::singleShot(0, this, &DaemonLink::drainEvents);
}

void DaemonLink::drainEvents()
{
    if (!m_events)
        return;
    while (auto event = m_events->next(0)) {
        m_lastEventMs = nowMs();
        if (!m_attached)
            setAttached(true);
        emit this->event(QString::fromStdString(event->type), event->body);
        if (!m_events)
            return; // a handler reconnected
    }
}

void DaemonLink::setAttached(bool attached)
{
    if (attached == m_attached)
        return;
    m_attached = attached;
    if (attached)
        m_attachedSinceStart = true;
    // Subscribe afresh before the views ask for the current state (a
    // subscriber of a previous daemon may hold a stale connection).
    if (attached)
        connectEvents();
    emit attachedChanged(attached);
}

void DaemonLink::watchdog()
{
    if (m_attached && nowMs() - m_lastEventMs < kSilenceMs)
        return;
    if (m_pinging)
        return;
    m_pinging = true;
    request(
        qname(control::request::kStatus), control::Value::map(), this,
        [this](const DaemonReply& reply) {
            m_pinging = false;
            if (reply.ok) {
                m_lastEventMs = nowMs();
                if (!m_events)
                    connectEvents();
                setAttached(true);
                return;
            }
            setAttached(false);
            startDaemon();
        },
        kPingTimeoutMs);
}

bool DaemonLink::startDaemon()
{
    if (m_lastStartMs != 0 && nowMs() - m_lastStartMs < kRestartGapMs)
        return false;
    // The one started last is still coming up (a slow disk, a busy machine):
    // a second one would only find the first one's lock.
    if (m_daemonPid > 0 && ::kill(pid_t(m_daemonPid), 0) == 0 && !m_attachedSinceStart)
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
    if (!process.startDetached(&m_daemonPid)) {
        const QString why = tr("Could not start the Crowdtrain service (%1).").arg(m_worker);
        emit notice(why);
        emit startFailed(why);
        return false;
    }
    ++m_started;
    m_attachedSinceStart = false;
    emit notice(m_started == 1 ? tr("Started the Crowdtrain service.")
                               : tr("The Crowdtrain service stopped; started it again."));
    return true;
}

} // namespace crowdtrain::ui
