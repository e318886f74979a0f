#pragma once

// A Link for page tests: requests are recorded, and the test answers them
// (answer, refuse) or sends events (emitEvent). Like the real link it never
// calls back before control returns: replies run when the test says so.
// GUI thread only.

#include "ui/link.h"

#include <QPointer>

#include <deque>

namespace crowdtrain::test {

class FakeLink : public ui::Link {
public:
    struct Request {
        QString type;
        control::Value body;
        QPointer<QObject> context;
        Handler done;
        int timeoutMs = 0;
    };

    bool attached() const override { return m_attached; }
    void request(const QString& type, const control::Value& body, QObject* context, Handler done,
        int timeoutMs = kDefaultTimeoutMs) override
    {
        m_pending.push_back({type, body, context, std::move(done), timeoutMs});
        m_sent.push_back(type);
    }

    void setAttached(bool attached)
    {
        m_attached = attached;
        emit attachedChanged(attached);
    }
    void emitEvent(const QString& type, const control::Value& body) { emit event(type, body); }

    // The types of every request sent so far, oldest first.
    const QStringList& sent() const { return m_sent; }
    // Whether a request of `type` awaits its answer.
    bool pending(const QString& type) const
    {
        for (const Request& r : m_pending)
            if (r.type == type)
                return true;
        return false;
    }
    int pendingCount() const { return int(m_pending.size()); }
    // The body of the oldest pending request of `type` (nil when none).
    control::Value bodyOf(const QString& type) const
    {
        for (const Request& r : m_pending)
            if (r.type == type)
                return r.body;
        return {};
    }

    // Answers the oldest pending request of `type`; false when none.
    bool answer(const QString& type, const control::Value& body = control::Value::map())
    {
        ui::DaemonReply reply;
        reply.ok = true;
        reply.body = body;
        return finish(type, reply);
    }
    bool refuse(const QString& type, const QString& code, const QString& message)
    {
        ui::DaemonReply reply;
        reply.code = code;
        reply.message = message;
        return finish(type, reply);
    }

private:
    bool finish(const QString& type, const ui::DaemonReply& reply)
    {
        for (auto it = m_pending.begin(); it != m_pending.end(); ++it) {
            if (it->type != type)
                continue;
            Request r = std::move(*it);
            m_pending.erase(it);
            if (r.context)
                r.done(reply);
            return true;
        }
        return false;
    }

    bool m_attached = true;
    std::deque<Request> m_pending;
    QStringList m_sent;
};

} // namespace crowdtrain::test
