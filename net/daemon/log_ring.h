#pragma once

// The daemon's log: the last lines (the `log` request), each also sent to
// the process's own log and as a `log` event, and the notices (a file set
// aside, a folder skipped) that the status lists until they fall out.
// Thread-safe: log() is called from every thread, with other locks held.

#include "net/control/value.h"

#include <deque>
#include <functional>
#include <mutex>
#include <string>

namespace crowdtrain::daemon {

class LogRing {
public:
    // `sink` gets each line as it comes (the process's stderr and the event).
    explicit LogRing(std::function<void(const std::string&)> sink);

    void log(const std::string& line);
    // Logged, and kept among the status's notices.
    void notice(const std::string& line);
    control::Value lines() const; // {lines: [...]}
    control::Value notices() const; // [...]

private:
    std::function<void(const std::string&)> m_sink;
    mutable std::mutex m_mutex; // a leaf lock: nothing is called with it held
    std::deque<std::string> m_lines;
    std::deque<std::string> m_notices;
};

} // namespace crowdtrain::daemon
