#pragma once

// What the app's views need of the daemon (docs/protocol.md, section 12):
// requests whose replies come later, the daemon's events, and whether one
// answers. DaemonLink is the real one (ZeroMQ, and it starts the service);
// the page tests use a fake that answers from the test. A request never
// calls back before control returns to the event loop. GUI thread only.

#include "net/control/value.h"

#include <QObject>
#include <QString>

#include <functional>

namespace crowdtrain::ui {

struct DaemonReply {
    bool ok = false;
    control::Value body; // the reply's body when ok
    QString code; // the error code when not ok ("no_daemon": no answer in time)
    QString message; // the daemon's message, for a person
};

class Link : public QObject {
    Q_OBJECT

public:
    using Handler = std::function<void(const DaemonReply&)>;
    // The daemon answers local requests in milliseconds; checkpoints,
    // catalog refreshes and joins may ask a hub.
    static constexpr int kDefaultTimeoutMs = 5000;

    using QObject::QObject;

    // Whether the last status request or event came from a live daemon.
    virtual bool attached() const = 0;
    // Sends a request; `done` runs once on its reply (or its failure: no
    // daemon, timeout) unless `context` is gone by then.
    virtual void request(const QString& type, const control::Value& body, QObject* context, Handler done,
        int timeoutMs = kDefaultTimeoutMs)
        = 0;

signals:
    // Each event as it comes: type and body (docs/protocol.md, 12.4).
    void event(const QString& type, const crowdtrain::control::Value& body);
    // A daemon answers (first time, or after it was lost).
    void attachedChanged(bool attached);
    // Plain words for the status line ("Started the Crowdtrain service", ...).
    void notice(const QString& text);
    // The service could not be started (the program is missing or broken);
    // the words say which program.
    void startFailed(const QString& text);
};

} // namespace crowdtrain::ui
