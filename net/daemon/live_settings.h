#pragma once

// The daemon's settings as the threads share them: a copy to read
// (Settings is a small map), a change validated and written on a copy and
// then swapped in, so no reader waits for the file. Thread-safe; set() is
// called from one queue only (the control API's "changes").

#include "net/daemon/settings.h"

#include <functional>
#include <mutex>

namespace crowdtrain::daemon {

class LiveSettings {
public:
    explicit LiveSettings(Settings settings);

    Settings get() const;
    // settings_set: {settings: map}; errors as Settings::set.
    Result<control::Value> set(const std::string& key, const control::Value& value);
    // settings_get: {settings, described}.
    control::Value describe() const;

private:
    mutable std::mutex m_mutex; // a leaf lock
    Settings m_settings;
};

} // namespace crowdtrain::daemon
