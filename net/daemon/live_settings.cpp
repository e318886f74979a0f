#include "net/daemon/live_settings.h"

namespace crowdtrain::daemon {

LiveSettings::LiveSettings(Settings settings)
    : m_settings(std::move(settings))
{ }

Settings LiveSettings::get() const
{
    std::lock_guard lock(m_mutex);
    return m_settings;
}

Result<control::Value> LiveSettings::set(const std::string& key, const control::Value& value)
{
    Settings changed = get();
    if (Status s = changed.set(key, value); !s)
        return s.error();
    control::Value v = control::Value::map();
    v.set("settings", changed.values());
    std::lock_guard lock(m_mutex);
    m_settings = std::move(changed);
    return v;
}

control::Value LiveSettings::describe() const
{
    std::lock_guard lock(m_mutex);
    control::Value v = control::Value::map();
    v.set("settings", m_settings.values()).set("described", m_settings.described());
    return v;
}

} // namespace crowdtrain::daemon
