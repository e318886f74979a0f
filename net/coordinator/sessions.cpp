#include "net/coordinator/sessions.h"

#include "net/wire/error_codes.h"

#include <cstdio>
#include <random>

namespace crowdtrain::coordinator {
namespace {

std::string randomSession()
{
    static thread_local std::mt19937_64 rng{std::random_device{}()};
    char text[33];
    std::snprintf(text, sizeof text, "%016llx%016llx", static_cast<unsigned long long>(rng()),
        static_cast<unsigned long long>(rng()));
    return text;
}

} // namespace

std::string Sessions::join(const std::string& key, const std::string& displayName, int64_t nowMs)
{
    Volunteer& v = m_volunteers[key];
    v.displayName = displayName;
    v.session = randomSession();
    v.lastSeenMs = nowMs;
    v.online = true;
    return v.session;
}

void Sessions::touch(const std::string& key, int64_t nowMs)
{
    auto it = m_volunteers.find(key);
    if (it != m_volunteers.end() && it->second.online)
        it->second.lastSeenMs = nowMs;
}

Status Sessions::check(const std::string& key, const std::string& session, const std::string& project) const
{
    auto it = m_volunteers.find(key);
    if (it == m_volunteers.end() || !it->second.online || it->second.session != session)
        return Error::make(
            net::errc::kNotJoined, "no live session " + session + " for this key in " + project + "; join");
    return Status::success();
}

Status Sessions::leave(const std::string& key, const std::string& session, const std::string& project)
{
    if (Status s = check(key, session, project); !s)
        return s;
    m_volunteers.at(key).online = false;
    return Status::success();
}

std::vector<std::string> Sessions::expire(int64_t nowMs)
{
    const int64_t sinceLast = m_lastExpireMs > 0 ? nowMs - m_lastExpireMs : 0;
    m_lastExpireMs = nowMs;
    if (sinceLast > m_intervalMs)
        for (auto& [key, v] : m_volunteers)
            v.lastSeenMs += sinceLast;
    std::vector<std::string> gone;
    for (auto& [key, v] : m_volunteers)
        if (v.online && nowMs - v.lastSeenMs > m_deadAfterMs) {
            v.online = false;
            gone.push_back(key);
        }
    return gone;
}

uint64_t Sessions::online() const
{
    uint64_t n = 0;
    for (const auto& [key, v] : m_volunteers)
        n += v.online ? 1 : 0;
    return n;
}

} // namespace crowdtrain::coordinator
