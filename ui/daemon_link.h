#pragma once

// The app's link to the daemon (docs/protocol.md, section 12): the Link
// (ui/link.h) that the views use, over ZeroMQ. The GUI
// thread never waits on it: a request returns a DaemonRequest at once (a
// job, like QNetworkReply) whose finished() signal brings the reply later;
// several requests are in flight on one DEALER socket, replies are matched
// by id, each request has its own timeout. At most kReplyQueueLength are
// sent at a time (the daemon drops replies past a client's queue of that
// many, docs/protocol.md §12); the rest wait here, in order, and go out as
// answers come in. Events come through an
// EventSubscriber; QSocketNotifiers watch both sockets. It also keeps the
// daemon alive: when no daemon answers it starts one (`crowdtrain-worker
// run`, beside the app) and says so; when the daemon dies (progress events
// stop and a status request goes unanswered) it reports it, starts a new
// one and reattaches, emitting attachedChanged() so views fetch what they
// missed. A failed start is tried again at the next watchdog tick after the
// restart gap. GUI thread only.

#include "ui/link.h"

#include <QPointer>

#include <deque>
#include <filesystem>
#include <map>
#include <memory>

class QSocketNotifier;
class QTimer;

namespace crowdtrain::control {
class ControlClient;
class EventSubscriber;
} // namespace crowdtrain::control

namespace crowdtrain::ui {

// One request in flight. finished() is emitted exactly once, never before
// control returns to the event loop (so connecting after request() is
// safe); the object deletes itself afterwards.
class DaemonRequest : public QObject {
    Q_OBJECT

public:
    uint64_t id() const { return m_id; }
    const QString& type() const { return m_type; }
    bool isFinished() const { return m_finished; }
    const DaemonReply& reply() const { return m_reply; }

signals:
    void finished(const crowdtrain::ui::DaemonReply& reply);

private:
    friend class DaemonLink;
    DaemonRequest(const QString& type, QObject* parent);
    void finish(DaemonReply reply);

    QString m_type;
    uint64_t m_id = 0; // 0 until sent
    QTimer* m_timeout;
    DaemonReply m_reply;
    bool m_finished = false;
};

class DaemonLink : public Link {
    Q_OBJECT

public:
    // `controlDir`: empty for the default ($XDG_RUNTIME_DIR/crowdtrain);
    // `workerProgram`: the crowdtrain-worker to start (empty: beside the app).
    explicit DaemonLink(std::filesystem::path controlDir = {}, QString workerProgram = {}, QObject* parent = nullptr);
    ~DaemonLink() override;

    // Connects and asks the daemon for its status (starting a daemon when
    // none answers); the watchdog then keeps the link up. Returns at once.
    void start();
    bool attached() const override { return m_attached; }
    // Sends a request; the reply comes by the returned job's finished().
    DaemonRequest* request(
        const QString& type, const control::Value& body = control::Value::map(), int timeoutMs = kDefaultTimeoutMs);
    void request(const QString& type, const control::Value& body, QObject* context, Handler done,
        int timeoutMs = kDefaultTimeoutMs) override;
    // Requests not yet answered or timed out: sent, or waiting their turn.
    int inFlight() const { return int(m_requests.size() + m_waiting.size()); }
    // Of those, sent to the daemon: at most kReplyQueueLength.
    int sentInFlight() const { return int(m_requests.size()); }
    // How many daemons this link started (for the status line and tests).
    int daemonsStarted() const { return m_started; }
    const std::filesystem::path& controlDir() const { return m_dir; }

private:
    struct Waiting {
        QPointer<DaemonRequest> job;
        control::Value body;
    };
    bool ensureClient();
    void send(DaemonRequest* job, const control::Value& body, bool inRequest);
    void sendWaiting();
    void watchRequests();
    void retire(QSocketNotifier*& notifier);
    void connectEvents();
    void drainEvents();
    void drainReplies();
    void scheduleDrain();
    void timedOut(DaemonRequest* request, int timeoutMs);
    void setAttached(bool attached);
    void watchdog();
    bool startDaemon();

    std::filesystem::path m_dir;
    QString m_worker;
    std::unique_ptr<control::ControlClient> m_client;
    std::unique_ptr<control::EventSubscriber> m_events;
    QSocketNotifier* m_eventNotifier = nullptr;
    QSocketNotifier* m_replyNotifier = nullptr;
    uint64_t m_replyFdGeneration = 0;
    QTimer* m_watchdog = nullptr;
    QTimer* m_backstop = nullptr; // drains replies while any are awaited
    std::map<uint64_t, DaemonRequest*> m_requests; // by id, in flight
    std::deque<Waiting> m_waiting; // not sent yet: kReplyQueueLength are in flight
    bool m_drainScheduled = false;
    bool m_pinging = false;
    bool m_attached = false;
    int m_started = 0;
    qint64 m_lastEventMs = 0;
    qint64 m_lastStartMs = 0;
    qint64 m_daemonPid = 0; // the daemon this link started last
    bool m_attachedSinceStart = false;
};

} // namespace crowdtrain::ui
