#pragma once

// The daemon's handle on one crowdtrain-core process (docs/architecture.md,
// "Processes"; docs/protocol.md, §13): started with one end of a UNIX socket
// pair as its descriptor 3, greeted ("hello"), and ended by "exit" or, when
// it does not go, SIGKILL. The core exits when its daemon does (it watches
// its parent and its socket).
// Whatever the core sends is untrusted: a frame that does not decode ends
// the process, never the daemon.
//
// One thread uses a CoreProcess at a time, except kill(), which any thread
// may call (it only signals the process).

#include "net/core_link/core_channel.h"
#include "net/core_link/core_messages.h"

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <sys/types.h>

namespace crowdtrain::corelink {

struct CoreProcessOptions {
    std::filesystem::path binary{}; // crowdtrain-core; empty: defaultCoreBinary()
    std::filesystem::path logFile{}; // its standard output and error (appended); empty: the daemon's
    int helloTimeoutMs = 60000; // loading libtorch (and CUDA) can take a while
    // The core's nice value (0-19; never below the caller's own): the
    // training cores run below everything else on the volunteer's machine,
    // as BOINC runs its science applications (kTrainingCpuNice,
    // kTrainingGpuNice); 0 for work someone waits for ("Try it").
    int nice = 0;
};

// A CPU core takes whatever cycles nobody else wants (BOINC's "lowest"
// process priority, its default for CPU applications): the desktop, a game,
// a coordinator's loop on the same machine all come first.
inline constexpr int kTrainingCpuNice = 19;
// A GPU core mostly waits for its device, and a starved feeding thread
// idles the card: one step above (BOINC's "below normal", its default for
// GPU applications).
inline constexpr int kTrainingGpuNice = 10;

// crowdtrain-core beside this program (the build tree, or libexec/crowdtrain
// for the daemon), else PREFIX/libexec/crowdtrain/crowdtrain-core for a
// program in PREFIX/bin; CROWDTRAIN_CORE overrides both.
std::filesystem::path defaultCoreBinary();
// The CUDA core of the crowdtrain-core-cuda package, found the same way
// (CROWDTRAIN_CUDA_CORE overrides); it may be absent.
std::filesystem::path defaultCudaCoreBinary();

// The one command that adds the CUDA core, for the volunteer's eyes.
inline constexpr const char* kCudaCoreInstall = "sudo apt install crowdtrain-core-cuda";

class CoreProcess {
public:
    // Starts the core and exchanges hello. Errors: "core_failed" (it could
    // not start, answered wrongly, or speaks another protocol version).
    static Result<std::unique_ptr<CoreProcess>> start(const CoreProcessOptions& options);
    ~CoreProcess(); // stop()
    CoreProcess(const CoreProcess&) = delete;
    CoreProcess& operator=(const CoreProcess&) = delete;

    CoreChannel& channel() { return m_channel; }
    const CoreHello& hello() const { return m_hello; }
    pid_t pid() const { return m_pid; }

    // Asks the core to exit, waits up to graceMs, then kills it; reaps it.
    // Returns how it ended ("exited with status 0", "killed by signal 9").
    std::string stop(int graceMs = 5000);
    // SIGKILL now (a core that hangs); stop() or ended() reaps it.
    void kill();
    // After its channel failed: waits for the process (killing it after
    // graceMs) and says how it ended.
    std::string ended(int graceMs = 2000);

private:
    CoreProcess() = default;
    std::string reap(int graceMs);

    CoreChannel m_channel;
    CoreHello m_hello;
    std::atomic<pid_t> m_pid{-1};
};

// How a child ended, in words, from waitpid's status.
std::string exitWords(int status);

} // namespace crowdtrain::corelink
