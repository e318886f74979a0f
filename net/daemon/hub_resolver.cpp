#include "net/daemon/hub_resolver.h"

#include "net/wire/error_codes.h"

namespace crowdtrain::daemon {

HubResolver::HubResolver(HubDirectory& hubs, DemoOptions demo, std::function<void()> started)
    : m_hubs(hubs)
    , m_options(std::move(demo))
    , m_started(std::move(started))
{ }

Result<HubLink> HubResolver::resolve(const std::string& hub)
{
    if (hub != kDemoLabel)
        return parseHubLink(hub);
    std::lock_guard demoLock(m_demoMutex);
    if (!m_demo || !m_demo->alive()) {
        m_demo.reset();
        auto started = DemoHub::start(m_options);
        if (!started)
            return started.error();
        m_demo = std::move(*started);
        m_hubs.follow(m_demo->link(), kDemoLabel);
        {
            std::lock_guard lock(m_linkMutex);
            m_link = m_demo->link();
        }
        if (m_started)
            m_started(); // downloads that waited for it
    }
    return m_demo->link();
}

Result<HubLink> HubResolver::current(const std::string& hub) const
{
    if (hub != kDemoLabel)
        return parseHubLink(hub);
    std::lock_guard lock(m_linkMutex);
    if (!m_link)
        return Error::make(net::errc::kUnavailable, "the demo hub is not running (it starts when demo is joined)");
    return *m_link;
}

} // namespace crowdtrain::daemon
