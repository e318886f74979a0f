#include "net/daemon/daemon.h"

#include "core/error_codes.h"
#include "net/control/control_names.h"
#include "net/control/control_paths.h"
#include "net/daemon/daemon_requests.h"
#include "net/daemon/status_words.h"
#include "net/volunteer/local_store.h"
#include "net/wire/error_codes.h"

#include <zmq.hpp>

#include <chrono>
#include <cstdio>
#include <future>

namespace crowdtrain::daemon {

using control::Value;

namespace {

// How long each part of a shutdown took, as one log line: a slow stop says
// where its time went ("stopped in 41.2 s: the agent 40.9 s, ...").
class ShutdownClock {
public:
    template <class Part> void time(const char* name, Part&& part)
    {
        const auto start = std::chrono::steady_clock::now();
        part();
        m_line += m_line.empty() ? "" : ", ";
        m_line += name + (" " + seconds(std::chrono::steady_clock::now() - start));
    }
    std::string line(const char* what) const
    {
        return what + (" in " + seconds(std::chrono::steady_clock::now() - m_start)) + ": " + m_line;
    }

private:
    static std::string seconds(std::chrono::steady_clock::duration elapsed)
    {
        char text[32];
        std::snprintf(text, sizeof text, "%.1f s", std::chrono::duration<double>(elapsed).count());
        return text;
    }
    std::chrono::steady_clock::time_point m_start = std::chrono::steady_clock::now();
    std::string m_line;
};

} // namespace

Daemon::Daemon(DaemonOptions options)
    : m_options(std::move(options))
    , m_log([this](const std::string& line) {
        if (m_options.log)
            m_options.log(line);
        Value body = Value::map();
        body.set("line", line);
        publish(control::event::kLog, body);
    })
{ }

Result<std::unique_ptr<Daemon>> Daemon::open(DaemonOptions options)
{
    std::unique_ptr<Daemon> daemon(new Daemon(std::move(options)));
    if (Status s = daemon->initialise(); !s)
        return s.error();
    return daemon;
}

Status Daemon::lock()
{
    if (Status s = control::preparePrivateDir(m_options.controlDir); !s)
        return s;
    const std::filesystem::path lockFile = m_options.controlDir / "daemon.lock";
    auto lock = core::FolderLock::acquireFile(lockFile, 0600);
    if (!lock) {
        if (lock.error().code != core::errc::kFolderInUse)
            return lock.error();
        return Error::make(control::errc::kAlreadyRunning,
            "a Crowdtrain daemon is already running for this user (pid " + core::FolderLock::holderOf(lockFile)
                + ", control folder " + m_options.controlDir.string() + ")");
    }
    m_lock = std::move(*lock);
    return Status::success();
}

Status Daemon::initialise()
{
    if (Status s = lock(); !s)
        return s;
    std::error_code ec;
    std::filesystem::create_directories(m_options.dataDir, ec);
    if (ec)
        return Error::make(net::errc::kIoError, m_options.dataDir.string() + ": " + ec.message());
    std::string settingsNotice;
    auto settings = Settings::load(m_options.configDir / "settings.json", settingsNotice);
    if (!settings)
        return settings.error();
    m_settings = std::make_unique<LiveSettings>(std::move(*settings));
    if (!settingsNotice.empty())
        m_log.notice(settingsNotice);
    auto identity = net::loadOrCreateKeyPair(m_options.dataDir / "identity.key");
    if (!identity)
        return identity.error();
    m_identity = *identity;
    m_context = std::make_unique<zmq::context_t>();
    m_hubs = std::make_unique<HubDirectory>(*m_context, m_identity);

    DemoOptions demo;
    demo.dataDir = m_options.dataDir;
    demo.serverBinary = m_options.serverBinary;
    demo.prepareBinary = m_options.prepareBinary;
    demo.corpusDir = m_options.demoCorpusDir;
    demo.log = [this](const std::string& line) {
        if (m_options.log)
            m_options.log(line);
    };
    // Downloads that waited for the demo hub retry once it runs.
    m_resolver = std::make_unique<HubResolver>(*m_hubs, std::move(demo), [this] {
        if (m_checkpoints)
            m_checkpoints->retryNow(kDemoLabel);
    });
    m_limits = std::make_unique<LimitsMonitor>(m_options.dataDir, m_options.probes);
    // The agent fetches full states through the checkpoints' swarm session.
    auto stateSwarm = [this] { return m_swarm ? m_swarm->sharedSession() : nullptr; };
    auto stateSeeding = [this] { return m_swarm && m_swarm->seedingAllowed(); };
    m_joined = std::make_unique<JoinedProject>(JoinedProjectParts{
        m_options.dataDir, *m_hubs, *m_resolver, *m_limits, *m_settings, m_history, m_log, stateSwarm, stateSeeding});
    const bool resume = m_joined->load();
    if (!m_limits->startNotice().empty())
        m_log.notice(m_limits->startNotice());

    CheckpointSwarmOptions swarm;
    swarm.throttle = m_limits->throttle();
    swarm.seeding = [this] { return m_settings->get().get(control::setting::kSeeding); };
    swarm.listenPort = [this] { return uint16_t(m_settings->get().get(control::setting::kSwarmPort)); };
    swarm.training = [this] {
        std::string why;
        const control::DaemonState state = stateOf(m_joined->inputs(), why);
        return state != control::DaemonState::Idle && state != control::DaemonState::Paused
            && state != control::DaemonState::Offline && state != control::DaemonState::Stopped;
    };
    swarm.capReached = [throttle = m_limits->throttle()] { return throttle->capReached(); };
    swarm.resolve = [this](const std::string& hub) { return m_resolver->current(hub); };
    swarm.log = [this](const std::string& line) { m_log.log(line); };
    m_swarm = std::make_unique<CheckpointSwarm>(*m_hubs, std::move(swarm));

    CheckpointsOptions checkpoints;
    checkpoints.root = m_options.dataDir / "checkpoints";
    checkpoints.throttle = m_limits->throttle();
    checkpoints.swarm = m_swarm.get();
    checkpoints.publish = [this](std::string_view type, const Value& body) { publish(type, body); };
    checkpoints.log = [this](const std::string& line) { m_log.log(line); };
    checkpoints.notice = [this](const std::string& line) { m_log.notice(line); };
    checkpoints.resolve = [this](const std::string& hub) { return m_resolver->current(hub); };
    checkpoints.generating = [this](bool on) {
        m_joined->setGenerating(on);
        beatNow();
    };
    m_checkpoints = std::make_unique<Checkpoints>(*m_hubs, std::move(checkpoints));
    m_swarm->adoptAll(m_options.dataDir / "checkpoints"); // seeding resumes (as the setting allows)

    m_requests = std::make_unique<RequestTable>([this] { beatNow(); });
    addDaemonRequests(*m_requests,
        RequestParts{*m_joined, *m_settings, *m_hubs, *m_checkpoints, m_history, m_log, [this] { return status(); }});
    auto server = control::ControlServer::open(
        m_options.controlDir, [this](const control::Request& request, control::Responder respond) {
            m_requests->dispatch(request, std::move(respond));
        });
    if (!server)
        return server.error();
    m_server = std::move(*server);

    (void)m_joined->tick(); // the limits, before anything trains
    // Starting the demo hub can take minutes: the control thread answers meanwhile.
    if (resume)
        (void)m_requests->post(Lane::Changes, [this] { m_joined->resume(); });
    auto poller = std::make_unique<Poller>(PollerParts{*m_joined, m_history, *m_hubs, *m_checkpoints, *m_settings,
        [this] { return status(); }, [this](std::string_view type, const Value& body) { publish(type, body); },
        m_options.pollMs, m_options.hubRefreshMs});
    {
        std::lock_guard lock(m_pollerMutex);
        m_poller = std::move(poller);
    }
    m_log.log("daemon " + std::to_string(::getpid()) + " serving " + control::controlEndpoint(m_options.controlDir));
    return Status::success();
}

Daemon::~Daemon()
{
    stop();
    ShutdownClock clock;
    // The queues first: their jobs use everything below.
    clock.time("the request queues", [this] { m_requests.reset(); });
    clock.time("the poller", [this] {
        // Out of beatNow()'s reach first (a generation may still end), then
        // joined without the lock.
        std::unique_ptr<Poller> poller;
        {
            std::lock_guard lock(m_pollerMutex);
            poller = std::move(m_poller);
        }
    });
    clock.time("the checkpoints", [this] { m_checkpoints.reset(); });
    if (m_swarm)
        m_swarm->stopTicking(); // its ticker asks m_joined whether it trains
    // The agent first, while m_joined is still there: its seeding callbacks
    // reach it through m_swarm (swarm.training). Then the project.
    clock.time("the agent", [this] {
        if (m_joined)
            m_joined->stopAgent();
    });
    m_joined.reset();
    clock.time("the swarm", [this] { m_swarm.reset(); });
    m_server.reset();
    clock.time("the demo hub", [this] { m_resolver.reset(); });
    m_log.log(clock.line("stopped"));
}

Status Daemon::run()
{
    return m_server->run();
}

void Daemon::stop()
{
    ShutdownClock clock;
    // Without m_pollerMutex: Poller::stop waits for a running hub refresh,
    // and beatNow() callers must not wait behind it (the poller is only
    // destroyed by ~Daemon, after this).
    clock.time("the poller", [this] {
        if (m_poller)
            m_poller->stop();
    });
    if (m_server)
        m_server->stop();
    // Lets a running job finish (a demo hub starting) and drops the rest:
    // their requests are answered "internal", a waiting join() returns.
    clock.time("the running request", [this] {
        if (m_requests)
            m_requests->stop();
    });
    if (!m_stopLogged.exchange(true))
        m_log.log(clock.line("stopping"));
}

void Daemon::beatNow()
{
    std::lock_guard lock(m_pollerMutex);
    if (m_poller)
        m_poller->beatNow();
}

void Daemon::publish(std::string_view type, const Value& body)
{
    if (m_server)
        m_server->publish(type, body);
}

Status Daemon::join(const std::string& hub, const std::string& project)
{
    auto done = std::make_shared<std::promise<Status>>();
    auto result = done->get_future();
    if (!m_requests->post(Lane::Changes, [this, hub, project, done] { done->set_value(m_joined->join(hub, project)); }))
        return Error::make(control::errc::kBusy, "too many requests are waiting; try again shortly");
    try {
        return result.get();
    } catch (const std::future_error&) {
        return Error::make(control::errc::kStopping, "the daemon is stopping");
    }
}

Value Daemon::status() const
{
    Value v = statusValue(m_joined->inputs(), m_identity.publicKey, m_log.notices());
    if (m_swarm)
        v.set("swarm", m_swarm->status());
    return v;
}

} // namespace crowdtrain::daemon
