#include "net/daemon/hub_directory.h"

#include <algorithm>

namespace crowdtrain::daemon {

HubDirectory::HubDirectory(zmq::context_t& context, net::CurveKeyPair identity)
    : m_context(context)
    , m_identity(std::move(identity))
{ }

void HubDirectory::follow(const HubLink& hub, const std::string& label)
{
    std::lock_guard lock(m_mutex);
    const std::string link = formatHubLink(hub);
    for (HubEntry& entry : m_entries)
        if (entry.link == link) {
            if (!label.empty())
                entry.label = label;
            return;
        }
    m_entries.push_back({link, hub, label, {}, std::nullopt, "not asked yet"});
}

bool HubDirectory::unfollow(const std::string& link)
{
    std::lock_guard lock(m_mutex);
    const auto before = m_entries.size();
    std::erase_if(m_entries, [&](const HubEntry& entry) { return entry.link == link; });
    return m_entries.size() != before;
}

std::vector<HubEntry> HubDirectory::entries() const
{
    std::lock_guard lock(m_mutex);
    return m_entries;
}

std::optional<HubEntry> HubDirectory::find(const std::string& link) const
{
    std::lock_guard lock(m_mutex);
    for (const HubEntry& entry : m_entries)
        if (entry.link == link)
            return entry;
    return std::nullopt;
}

Result<std::unique_ptr<net::Client>> HubDirectory::connect(const HubLink& hub) const
{
    net::ClientOptions options;
    options.endpoint = hub.endpoint();
    options.serverPublicKey = hub.publicKey;
    options.keys = m_identity;
    return net::Client::connect(m_context, std::move(options));
}

void HubDirectory::refresh(int timeoutMs)
{
    for (const HubEntry& entry : entries())
        refreshOne(entry.link, timeoutMs);
}

void HubDirectory::refreshOne(const std::string& link, int timeoutMs)
{
    const auto entry = find(link);
    if (!entry)
        return;
    auto reply = call<net::ListProjectsReply>(entry->hub, net::ListProjectsRequest{}, timeoutMs);
    std::lock_guard lock(m_mutex);
    for (HubEntry& e : m_entries) {
        if (e.link != link)
            continue;
        if (reply) {
            e.projects = reply->projects;
            e.lastSeenMs = unixNowMs();
            e.error.clear();
        } else {
            e.error = reply.error().code == "timeout" ? "no answer within " + std::to_string(timeoutMs) + " ms"
                                                      : reply.error().message;
        }
    }
}

} // namespace crowdtrain::daemon
