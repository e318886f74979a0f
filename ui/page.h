#pragma once

// The base of the main window's pages. Each page reads the daemon through
// the Link it is given, never waiting on it: reload() asks for what the
// page shows (on attaching and when it is opened) and the replies update
// the page when they come; reloads asked for while one is in flight are
// coalesced into one more. onEvent() applies the daemon's events.
// GUI thread only.

#include "ui/link.h"

#include <QWidget>

namespace crowdtrain::ui {

class Page : public QWidget {
    Q_OBJECT

public:
    Page(Link& link, QWidget* parent)
        : QWidget(parent)
        , m_link(link)
    { }
    // Asks for the page's data; while a reload is in flight, one more is
    // sent after it (any number of calls meanwhile count as one).
    void reload();
    // Whether a reload's requests are in flight.
    bool loading() const { return m_loading > 0; }
    virtual void onEvent(const QString& type, const control::Value& body)
    {
        (void)type;
        (void)body;
    }

signals:
    // Plain words for the window's status bar.
    void message(const QString& text);
    // A reload's replies have all been applied.
    void loaded();

protected:
    // Sends the requests of one reload through fetch().
    virtual void load() { }
    // A request of the reload in progress; `done` runs on its reply.
    void fetch(
        const QString& type, const control::Value& body, Link::Handler done, int timeoutMs = Link::kDefaultTimeoutMs);
    // An action (pause, join, ...): `done` runs on its reply.
    void send(
        const QString& type, const control::Value& body, Link::Handler done, int timeoutMs = Link::kDefaultTimeoutMs);

    Link& m_link;

private:
    void fetched();

    int m_loading = 0;
    bool m_again = false;
};

} // namespace crowdtrain::ui
