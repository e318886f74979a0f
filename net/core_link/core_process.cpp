#include "net/core_link/core_process.h"

#include "core/thread_priority.h"
#include "net/wire/error_codes.h"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace crowdtrain::corelink {
namespace {

Error coreFailed(const std::string& what)
{
    return Error::make(net::errc::kCoreFailed, "the training core " + what);
}

} // namespace

namespace {

std::filesystem::path ourProgram(const char* name, const char* variable)
{
    if (const char* forced = std::getenv(variable); forced && *forced)
        return forced;
    std::error_code ec;
    const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    const auto beside = self.parent_path() / name;
    if (std::filesystem::exists(beside, ec))
        return beside;
    return self.parent_path().parent_path() / "libexec" / "crowdtrain" / name;
}

} // namespace

std::filesystem::path defaultCoreBinary()
{
    return ourProgram("crowdtrain-core", "CROWDTRAIN_CORE");
}

std::filesystem::path defaultCudaCoreBinary()
{
    return ourProgram("crowdtrain-core-cuda", "CROWDTRAIN_CUDA_CORE");
}

std::string exitWords(int status)
{
    if (WIFEXITED(status))
        return "exited with status " + std::to_string(WEXITSTATUS(status));
    if (WIFSIGNALED(status)) {
        const int sig = WTERMSIG(status);
        const char* name = sigabbrev_np(sig);
        return "was killed by signal " + std::to_string(sig) + (name ? std::string(" (SIG") + name + ")" : "")
            + (sig == SIGKILL ? ", by us or by the kernel's out-of-memory killer" : "");
    }
    return "ended (status " + std::to_string(status) + ")";
}

Result<std::unique_ptr<CoreProcess>> CoreProcess::start(const CoreProcessOptions& options)
{
    const std::string binary = (options.binary.empty() ? defaultCoreBinary() : options.binary).string();
    if (::access(binary.c_str(), X_OK) != 0)
        return coreFailed("program " + binary + " cannot be run: " + std::strerror(errno));
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0)
        return coreFailed(std::string("has no socket: ") + std::strerror(errno));
    const std::string logFile = options.logFile.string();
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) {
        ::close(pair[0]);
        ::close(pair[1]);
        return coreFailed(std::string("could not be started: fork: ") + std::strerror(errno));
    }
    if (pid == 0) {
        sigset_t none;
        sigemptyset(&none);
        ::sigprocmask(SIG_SETMASK, &none, nullptr);
        // No PR_SET_PDEATHSIG: it fires when the forking *thread* ends, and
        // cores are started from short-lived threads. The core watches its
        // parent itself (core_main.cpp).
        if (::getppid() != parent)
            ::_exit(1);
        core::niceAtLeast(options.nice); // the threads the core starts inherit it
        ::dup2(pair[1], 3); // dup2 clears close-on-exec on the copy
        if (!logFile.empty()) {
            const int log = ::open(logFile.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
            if (log >= 0) {
                ::dup2(log, STDOUT_FILENO);
                ::dup2(log, STDERR_FILENO);
            }
        }
        ::execl(binary.c_str(), binary.c_str(), "serve", "--channel-fd", "3", static_cast<char*>(nullptr));
        ::_exit(127);
    }
    ::close(pair[1]);
    std::unique_ptr<CoreProcess> core(new CoreProcess());
    core->m_pid = pid;
    core->m_channel = CoreChannel(pair[0]);
    net::MapWriter hello = message(type::kHello);
    hello.u64("protocol", kCoreProtocol);
    if (Status sent = core->m_channel.send(hello); !sent)
        return coreFailed(core->ended() + " before it was greeted");
    auto reply = core->m_channel.receive(options.helloTimeoutMs);
    if (!reply) {
        if (reply.error().code == net::errc::kTimeout)
            core->kill();
        return coreFailed(core->ended() + " without answering hello (" + reply.error().message + ")");
    }
    auto decoded = CoreHello::decode(*reply);
    if (!decoded)
        return coreFailed("answered hello wrongly: " + decoded.error().message);
    if (decoded->protocol != kCoreProtocol)
        return coreFailed("speaks protocol " + std::to_string(decoded->protocol) + ", this daemon "
            + std::to_string(kCoreProtocol) + ": install matching crowdtrain packages");
    core->m_hello = std::move(*decoded);
    return core;
}

CoreProcess::~CoreProcess()
{
    stop();
}

void CoreProcess::kill()
{
    const pid_t pid = m_pid.load();
    if (pid > 0)
        ::kill(pid, SIGKILL);
}

std::string CoreProcess::reap(int graceMs)
{
    const pid_t pid = m_pid.load();
    if (pid <= 0)
        return "was not running";
    int status = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(graceMs);
    while (true) {
        const pid_t done = ::waitpid(pid, &status, WNOHANG);
        if (done == pid)
            break;
        if (done < 0 && errno != EINTR) {
            m_pid = -1;
            return "ended";
        }
        if (std::chrono::steady_clock::now() >= deadline) {
            ::kill(pid, SIGKILL);
            while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) { }
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    m_pid = -1;
    m_channel.close();
    return exitWords(status);
}

std::string CoreProcess::stop(int graceMs)
{
    if (m_pid.load() <= 0)
        return "was not running";
    if (m_channel.open())
        (void)m_channel.send(message(type::kExit));
    return reap(graceMs);
}

std::string CoreProcess::ended(int graceMs)
{
    m_channel.close();
    return reap(graceMs);
}

} // namespace crowdtrain::corelink
