#include "net/daemon/project_runner.h"
#include "core/thread_name.h"

namespace crowdtrain::daemon {

void PauseGate::setPaused(bool paused)
{
    {
        std::lock_guard lock(m_mutex);
        m_paused = paused;
    }
    m_changed.notify_all();
}

bool PauseGate::paused() const
{
    std::lock_guard lock(m_mutex);
    return m_paused;
}

void PauseGate::setBusyTarget(double share)
{
    {
        std::lock_guard lock(m_mutex);
        if (share == m_governor.target())
            return;
        m_governor.setTarget(share);
    }
    m_changed.notify_all();
}

double PauseGate::measuredBusy() const
{
    std::lock_guard lock(m_mutex);
    return m_governor.measured(limits::BusyGovernor::Clock::now());
}

void PauseGate::afterStep(double stepMs, const std::function<bool()>& released)
{
    std::unique_lock lock(m_mutex);
    const auto end = limits::BusyGovernor::Clock::now();
    const auto rest = m_governor.afterStep(std::chrono::duration<double, std::milli>(stepMs), end);
    const auto until = end + std::chrono::duration_cast<limits::BusyGovernor::Clock::duration>(rest);
    // A raised target ends the rest early; a pause turns it into a wait.
    const double target = m_governor.target();
    m_changed.wait_until(lock, until, [&] { return released() || m_paused || m_governor.target() > target; });
    ++m_held;
    m_changed.wait(lock, [&] { return !m_paused || released(); });
    --m_held;
}

int PauseGate::held() const
{
    std::lock_guard lock(m_mutex);
    return m_held;
}

void PauseGate::wait(const std::function<bool()>& released)
{
    std::unique_lock lock(m_mutex);
    ++m_held;
    m_changed.wait(lock, [&] { return !m_paused || released(); });
    --m_held;
}

void PauseGate::wake()
{
    {
        std::lock_guard lock(m_mutex);
    }
    m_changed.notify_all();
}

namespace {

volunteer::AgentOptions withTarget(volunteer::AgentOptions options, const ProjectRunner::Target& target)
{
    options.endpoint = target.hub.endpoint();
    options.serverKey = target.hub.publicKey;
    options.project = target.project;
    return options;
}

} // namespace

ProjectRunner::ProjectRunner(Target target, volunteer::AgentOptions options, PauseGate& gate)
    : m_target(std::move(target))
    , m_gate(gate)
    , m_agent([&] {
        auto o = withTarget(std::move(options), m_target);
        o.betweenSteps = [this](double stepMs, const std::atomic<bool>& abort) {
            m_gate.afterStep(stepMs, [&] { return abort.load() || m_agent.stopRequested() || m_release.load(); });
        };
        o.releaseDevice = [this] { return m_release.load(); };
        o.beforeTask = [this] { m_gate.wait([&] { return m_agent.stopRequested(); }); };
        return o;
    }())
{
    m_thread = std::thread([this] {
        core::nameThisThread("project-agent"); // the session: heartbeats, tasks, versions
        Status ran = m_agent.run();
        std::lock_guard lock(m_mutex);
        m_running = false;
        if (!ran)
            m_failure = ran.error();
    });
}

ProjectRunner::~ProjectRunner()
{
    m_agent.stop();
    m_gate.wake();
    m_thread.join();
}

void ProjectRunner::releaseDevice(bool release, const std::string& why)
{
    if (m_release.exchange(release) == release)
        return;
    if (release) {
        // An idle core exits now; one in a task wraps the task up (the
        // pause lets go of its step) and exits when it is submitted.
        m_agent.releaseCore(why);
        m_gate.wake();
    }
}

bool ProjectRunner::running() const
{
    std::lock_guard lock(m_mutex);
    return m_running;
}

std::optional<Error> ProjectRunner::failure() const
{
    std::lock_guard lock(m_mutex);
    return m_failure;
}

} // namespace crowdtrain::daemon
