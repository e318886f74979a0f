#pragma once

// The built-in demo hub: a coordinator on loopback, started by the daemon
// as a child process (crowdtrain-server) when the volunteer joins the demo
// project, with a small character-level model of a real English corpus that
// Debian's `fortunes` package installs (/usr/share/games/fortunes: about
// 2.4 MB of quotations, jokes and definitions; installer/install-deps.sh
// installs it). The corpus is prepared once under <dataDir>/demo/data;
// the coordinator's state under <dataDir>/demo/state, so the demo's model
// keeps learning across restarts. Nothing outside the install is needed.
//
// Thread-safety: start() and the destructor on one thread; link() after.

#include "net/control/control_names.h"
#include "net/daemon/hub_link.h"

#include <filesystem>
#include <functional>
#include <memory>
#include <sys/types.h>

namespace crowdtrain::daemon {

inline constexpr const char* kDemoProject = control::kDemoProject.data();
inline constexpr const char* kDemoLabel = control::kDemoHub.data();

struct DemoOptions {
    std::filesystem::path dataDir; // the daemon's data folder
    std::filesystem::path serverBinary; // crowdtrain-server
    std::filesystem::path prepareBinary; // crowdtrain-prepare (tokenizes the corpus once)
    std::filesystem::path corpusDir = "/usr/share/games/fortunes";
    std::function<void(const std::string&)> log;
};

class DemoHub {
public:
    // Prepares the data (first time), writes the spec and starts the
    // coordinator; returns once it printed its endpoints. Errors:
    // "no_demo_corpus" (the fortunes package is missing), the preparation's
    // and the server's own.
    static Result<std::unique_ptr<DemoHub>> start(const DemoOptions& options);
    ~DemoHub(); // SIGTERM, then waits for the coordinator (SIGKILL after 10 s)

    const HubLink& link() const { return m_link; }
    pid_t pid() const { return m_pid; }
    bool alive() const;

private:
    DemoHub() = default;
    HubLink m_link;
    pid_t m_pid = -1;
};

// The corpus files of the demo under `corpusDir` (regular text files; the
// fortune index files are left out), sorted.
std::vector<std::filesystem::path> demoCorpusFiles(const std::filesystem::path& corpusDir);

} // namespace crowdtrain::daemon
