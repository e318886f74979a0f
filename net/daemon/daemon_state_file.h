#pragma once

// <dataDir>/daemon.json: the followed hubs, the joined project and whether
// the volunteer paused or snoozed it, so a restarted daemon resumes where
// it was. Written atomically on every change, in two halves so that no file
// is written with the owner's lock held: the numbered text (snapshot(),
// under that lock), then the write (without it; a snapshot older than the
// last one written is skipped). A file that is not as snapshot() writes it
// is set aside with a notice (state_file.h).

#include "core/result.h"

#include <cstdint>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace crowdtrain::daemon {

struct SavedState {
    std::vector<std::string> hubs; // hub links (the demo hub is never saved)
    std::string joinedHub; // a hub link, "demo", or "" with no project
    std::string joinedProject;
    bool paused = false;
    int64_t snoozeUntilMs = 0;
};

class DaemonStateFile {
public:
    struct Snapshot {
        uint64_t seq = 0;
        std::string text;
    };

    explicit DaemonStateFile(std::filesystem::path file);

    // nullopt when absent, or set aside (`notice` says so).
    std::optional<SavedState> load(std::string& notice) const;
    // Not thread-safe: called with the owner's lock held.
    Snapshot snapshot(const SavedState& state);
    // Thread-safe.
    Status write(const Snapshot& snapshot);

private:
    std::filesystem::path m_file;
    uint64_t m_seq = 0; // the last snapshot's number
    std::mutex m_writeMutex; // guards m_writtenSeq and the writes
    uint64_t m_writtenSeq = 0;
};

} // namespace crowdtrain::daemon
