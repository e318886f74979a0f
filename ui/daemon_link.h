#pragma once

// The app's one link to the daemon (docs/protocol.md, section 12): requests
// through a ControlClient, events through an EventSubscriber whose socket a
// QSocketNotifier watches, so the GUI thread never blocks on an event. It
// also keeps the daemon alive: when no daemon answers it starts one
// (`crowdtrain-worker run`, beside the app) and says so; when the daemon
// dies (requests fail, progress events stop) it reports it, starts a new
// one and reattaches, emitting attached() so views fetch what they missed.
// GUI thread only.

#include "net/control/value.h"

#include <QObject>
#include <QString>

#include <filesystem>
#include <memory>

class QSocketNotifier;
class QTimer;

namespace crowdtrain::control {
class ControlClient;
class EventSubscriber;
} // namespace crowdtrain::control

namespace crowdtrain::ui {

class DaemonLink : public QObject {
    Q_OBJECT

public:
    struct Reply {
        bool ok = false;
        control::Value body; // the reply's body when ok
        QString code; // the error code when not ok
        QString message; // the daemon's message, for a person
    };

    // `controlDir`: empty for the default ($XDG_RUNTIME_DIR/crowdtrain);
    // `workerProgram`: the crowdtrain-worker to start (empty: beside the app).
    explicit DaemonLink(std::filesystem::path controlDir = {}, QString workerProgram = {}, QObject* parent = nullptr);
    ~DaemonLink() override;

    // Connects (starting a daemon when none answers); the watchdog then
    // keeps the link up.
    void start();
    // Whether the last request or event came from a live daemon.
    bool attached() const { return m_attached; }
    // A request, waiting at most timeoutMs (the daemon answers local
    // requests in milliseconds; checkpoints and catalog may ask a hub).
    Reply call(const QString& type, const control::Value& body = control::Value::map(), int timeoutMs = 3000);
    // How many daemons this link started (for the status line and tests).
    int daemonsStarted() const { return m_started; }
    const std::filesystem::path& controlDir() const { return m_dir; }

signals:
    // Each event as it comes: type and body (docs/protocol.md, 12.4).
    void event(const QString& type, const crowdtrain::control::Value& body);
    // A daemon answers (first time, or after it was lost).
    void attachedChanged(bool attached);
    // Plain words for the status line ("Started the Crowdtrain service", ...).
    void notice(const QString& text);

private:
    void connectSockets();
    void drainEvents();
    void watchdog();
    bool startDaemon();

    std::filesystem::path m_dir;
    QString m_worker;
    std::unique_ptr<control::ControlClient> m_client;
    std::unique_ptr<control::EventSubscriber> m_events;
    QSocketNotifier* m_notifier = nullptr;
    QTimer* m_watchdog = nullptr;
    bool m_attached = false;
    int m_started = 0;
    qint64 m_lastEventMs = 0;
    qint64 m_lastStartMs = 0;
};

} // namespace crowdtrain::ui
