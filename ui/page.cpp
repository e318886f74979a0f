#include "ui/page.h"

namespace crowdtrain::ui {

void Page::reload()
{
    if (m_loading > 0) {
        m_again = true;
        return;
    }
    // Counted as one request until load() has sent them all, so that a
    // reply cannot end the reload half-way.
    ++m_loading;
    load();
    fetched();
}

void Page::fetch(const QString& type, const control::Value& body, Link::Handler done, int timeoutMs)
{
    ++m_loading;
    m_link.request(
        type, body, this,
        [this, done = std::move(done)](const DaemonReply& reply) {
            done(reply);
            fetched();
        },
        timeoutMs);
}

void Page::send(const QString& type, const control::Value& body, Link::Handler done, int timeoutMs)
{
    m_link.request(type, body, this, std::move(done), timeoutMs);
}

void Page::fetched()
{
    if (--m_loading > 0)
        return;
    emit loaded();
    if (m_again) {
        m_again = false;
        reload();
    }
}

} // namespace crowdtrain::ui
