#include "net/volunteer/agent_loop.h"

#include "crowdtrain/version.h"
#include "net/wire/error_codes.h"

#include <cstdarg>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <thread>

namespace crowdtrain::volunteer {
namespace {

// Errors of this machine's set-up: retrying cannot fix them.
bool isFatal(const Error& error)
{
    return net::isFatalForVolunteer(error.code);
}

engine::GptConfig gptConfigOf(const net::ModelConfig& model)
{
    engine::GptConfig config;
    config.nLayer = int64_t(model.nLayer);
    config.nHead = int64_t(model.nHead);
    config.nEmbd = int64_t(model.nEmbd);
    config.blockSize = int64_t(model.blockSize);
    config.vocabSize = int64_t(model.vocabSize);
    config.dropout = 0.0;
    return config;
}

} // namespace

std::string AgentSummary::toJson() const
{
    const nlohmann::json json = {
        {"tasks", tasks},
        {"accepted", accepted},
        {"rejected", rejected},
        {"dropped", dropped},
        {"unconfirmed", unconfirmed},
        {"tokens", tokens},
        {"compute_s", computeMs / 1e3},
        {"wall_s", wallMs / 1e3},
        {"utilisation", utilisation()},
        {"bytes_sent", bytesSent},
        {"bytes_received", bytesReceived},
        {"version", version},
        {"reconnects", reconnects},
    };
    return json.dump();
}

VolunteerAgent::VolunteerAgent(AgentOptions options)
    : m_options(std::move(options))
{ }

VolunteerAgent::~VolunteerAgent() = default;

Status VolunteerAgent::run()
{
    AgentLoop loop(*this, m_options);
    return loop.run();
}

AgentSummary VolunteerAgent::summary() const
{
    std::lock_guard lock(m_summaryMutex);
    return m_summary;
}

void VolunteerAgent::publish(const AgentSummary& summary)
{
    std::lock_guard lock(m_summaryMutex);
    m_summary = summary;
}

AgentLoop::AgentLoop(VolunteerAgent& agent, const AgentOptions& options)
    : m_agent(agent)
    , m_options(options)
    , m_context(1)
{ }

AgentLoop::~AgentLoop()
{
    // Every socket closes before the context terminates (which waits for them).
    m_connection.reset();
    m_events.reset();
    m_context.close();
}

void AgentLoop::log(const char* format, ...)
{
    if (!m_options.log)
        return;
    char line[1024];
    va_list args;
    va_start(args, format);
    std::vsnprintf(line, sizeof line, format, args);
    va_end(args);
    m_options.log(line);
}

void AgentLoop::publish()
{
    m_summary.wallMs = std::chrono::duration<double, std::milli>(Clock::now() - m_started).count();
    m_summary.bytesSent = m_traffic.bytesSent;
    m_summary.bytesReceived = m_traffic.bytesReceived;
    m_summary.version = m_theta ? m_theta->version : 0;
    if (auto* pieces = dynamic_cast<PieceLibrary*>(m_shards.get()))
        m_summary.pieceFetches = pieces->fetched();
    m_agent.publish(m_summary);
}

void AgentLoop::setPhase(const char* phase)
{
    if (m_summary.phase == phase)
        return;
    m_summary.phase = phase;
    publish();
}

void AgentLoop::sleepFor(uint64_t ms)
{
    const auto until = Clock::now() + std::chrono::milliseconds(ms);
    while (!stopping() && Clock::now() < until)
        std::this_thread::sleep_for(std::min<Clock::duration>(std::chrono::milliseconds(50), until - Clock::now()));
}

// A small request gets `liveness` heartbeat intervals: no answer by then
// means the coordinator is gone (Paranoid Pirate).
int AgentLoop::controlTimeoutMs() const
{
    return int(std::max<uint64_t>(1000, m_intervalMs * m_liveness));
}

// A chunk of up to 4 MiB may take a while on a slow link.
int AgentLoop::transferTimeoutMs() const
{
    return std::max(10000, 2 * controlTimeoutMs());
}

Status AgentLoop::prepare()
{
    if (m_options.dataDir.empty()) {
        auto dir = defaultDataDir();
        if (!dir)
            return dir.error();
        m_dataDir = *dir;
    } else {
        m_dataDir = m_options.dataDir;
    }
    std::error_code ec;
    std::filesystem::create_directories(m_dataDir, ec);
    if (ec)
        return Error::make(
            net::errc::kIoError, "cannot create the data folder " + m_dataDir.string() + ": " + ec.message());
    auto keys = net::loadOrCreateKeyPair(identityKeyFile(m_dataDir));
    if (!keys)
        return keys.error();
    m_keys = *keys;
    auto serverKey = resolveServerKey(m_options.serverKey);
    if (!serverKey)
        return serverKey.error();
    m_serverKey = *serverKey;
    auto folder = ProjectFolder::open(m_dataDir, m_options.project);
    if (!folder)
        return folder.error();
    m_folder = std::move(*folder);
    if (m_options.preparedDataDir.empty()) {
        // The coordinator serves each task's pieces (docs/protocol.md, "Data pieces").
        m_shards = std::make_unique<PieceLibrary>(
            m_folder->dir() / "pieces", m_options.pieceCacheBytes,
            [this] {
                return std::make_unique<ConnectionSource>(*m_connection, m_options.project, transferTimeoutMs());
            },
            &m_agent.m_stop);
    } else {
        if (!std::filesystem::is_directory(m_options.preparedDataDir, ec))
            return Error::make(net::errc::kMissingShard,
                "the project's prepared data folder '" + m_options.preparedDataDir.string() + "' does not exist");
        m_shards = std::make_unique<ShardLibrary>(m_options.preparedDataDir);
    }
    log("volunteer %s (data folder %s)", m_keys.publicKey.c_str(), m_dataDir.string().c_str());
    return Status::success();
}

Status AgentLoop::run()
{
    m_started = Clock::now();
    if (Status prepared = prepare(); !prepared)
        return prepared;
    Status result = Status::success();
    while (!stopping() && !limitsReached()) {
        if (!m_joined) {
            setPhase(m_everJoined ? "offline" : "connecting");
            Status joined = joinOnce();
            if (!joined) {
                if (isFatal(joined.error()) || (!m_everJoined && !isConnectionError(joined.error()))) {
                    result = joined;
                    break;
                }
                const uint64_t delayMs = m_backoff.nextDelayMs();
                m_summary.lastError = joined.error().message;
                setPhase("offline");
                log("cannot join %s: %s; retrying in %.1f s", m_options.endpoint.c_str(),
                    joined.error().message.c_str(), double(delayMs) / 1e3);
                disconnect("");
                sleepFor(delayMs);
                continue;
            }
        }
        Status step = cycle();
        publish();
        if (step)
            continue;
        const Error& error = step.error();
        if (isFatal(error)) {
            result = step;
            break;
        }
        if (error.code == net::errc::kCancelled && stopping())
            break;
        if (isConnectionError(error)) {
            disconnect(error.message);
            continue;
        }
        if (error.code == net::errc::kNotJoined) {
            log("the coordinator no longer knows this session; joining again");
            m_joined = false;
            continue;
        }
        // The server said no to something unexpected: log it, wait, carry on.
        const uint64_t delayMs = m_backoff.nextDelayMs();
        m_summary.lastError = error.message;
        log("%s (%s); retrying in %.1f s", error.message.c_str(), error.code.c_str(), double(delayMs) / 1e3);
        m_joined = false;
        sleepFor(delayMs);
    }
    leave();
    m_summary.phase = "stopped";
    publish();
    return result;
}

void AgentLoop::disconnect(const std::string& why)
{
    if (m_joined && !why.empty())
        log("lost the coordinator (%s); reconnecting", why.c_str());
    if (m_joined)
        ++m_summary.reconnects;
    m_joined = false;
    m_connection.reset();
}

Status AgentLoop::joinOnce()
{
    if (!m_connection) {
        net::ClientOptions options;
        options.endpoint = m_options.endpoint;
        options.serverPublicKey = m_serverKey;
        options.keys = m_keys;
        auto connection = Connection::open(m_context, std::move(options), m_traffic);
        if (!connection)
            return connection.error();
        m_connection = std::move(*connection);
    }
    net::JoinRequest request;
    request.project = m_options.project;
    request.displayName = m_options.displayName;
    request.clientVersion
        = m_options.clientVersion.empty() ? std::string("crowdtrain-worker ") + kVersion : m_options.clientVersion;
    request.device = m_options.device == "cpu" ? "CPU" : m_options.device;
    auto reply = m_connection->call<net::JoinReply>(request, controlTimeoutMs());
    if (!reply)
        return reply.error();
    if (Status checked = checkJoin(*reply); !checked)
        return checked;
    m_join = std::move(*reply);
    m_serverVersion = m_join.version;
    m_intervalMs = std::clamp(m_join.heartbeatIntervalMs, net::kMinHeartbeatIntervalMs, net::kMaxHeartbeatIntervalMs);
    m_liveness = std::clamp(m_join.heartbeatLiveness, net::kMinHeartbeatLiveness, net::kMaxHeartbeatLiveness);
    m_joined = true;
    m_backoff.reset();
    listenForEvents();
    log("joined %s at %s: version %llu, %llu parameters, codec %s, H=%llu, heartbeat %llu ms",
        m_options.project.c_str(), m_options.endpoint.c_str(), static_cast<unsigned long long>(m_join.version),
        static_cast<unsigned long long>(m_elements), m_join.codec.c_str(),
        static_cast<unsigned long long>(m_join.inner.steps), static_cast<unsigned long long>(m_intervalMs));
    m_everJoined = true;
    return Status::success();
}

void AgentLoop::listenForEvents()
{
    const auto endpoint = EventListener::endpointFor(m_options.endpoint, m_join.eventsPort);
    if (!endpoint) {
        m_events.reset();
        return;
    }
    if (m_events && m_events->endpoint() == *endpoint)
        return;
    auto listener = EventListener::open(m_context, *endpoint, m_serverKey, m_keys, m_options.project);
    if (!listener) {
        // Heartbeats carry the same news, only later.
        log("no events from %s: %s", endpoint->c_str(), listener.error().message.c_str());
        m_events.reset();
        return;
    }
    m_events.emplace(std::move(*listener));
}

Status AgentLoop::checkJoin(const net::JoinReply& reply)
{
    if (reply.project.name != m_options.project)
        return Error::make(
            net::errc::kMalformed, "joined project '" + reply.project.name + "', asked for " + m_options.project);
    auto codec = diloco::parseCodec(reply.codec);
    if (!codec)
        return Error::make(
            net::errc::kBadCodec, "the project's codec '" + reply.codec + "' is not one this worker knows");
    const engine::GptConfig model = gptConfigOf(reply.project.model);
    if (Status valid = engine::validate(model); !valid)
        return Error::make(
            net::errc::kManifestMismatch, "the project's model cannot be built: " + valid.error().message);
    if (reply.inner.steps == 0 || reply.inner.batchSize == 0 || reply.inner.blockSize != reply.project.model.blockSize)
        return Error::make(
            net::errc::kBadOptions, "the project's inner settings are not usable (steps, batch, block size)");
    if (m_checkedManifest.empty() || !(model == m_model)) {
        // Building the model once tells whether this worker lays the
        // parameters out as the coordinator does.
        m_checkedManifest = InnerTrainer::wireManifestOf(model);
    }
    if (m_checkedManifest != reply.manifest)
        return Error::make(net::errc::kManifestMismatch,
            "the coordinator's parameter manifest differs from this worker's model (" + reply.manifestSha256
                + "); update crowdtrain-worker");
    const uint64_t elements = net::manifestElements(reply.manifest);
    if (reply.stateBytes != elements * 4)
        return Error::make(net::errc::kMalformed, "the state's size does not match the manifest");
    if (m_theta && !(model == m_model))
        m_theta.reset();
    if (m_trainer && !m_trainer->sameSettings(model, reply.inner))
        m_trainer.reset();
    m_model = model;
    m_codec = *codec;
    m_elements = elements;
    return Status::success();
}

Result<net::HeartbeatReply> AgentLoop::heartbeat()
{
    net::HeartbeatRequest request{m_options.project, m_join.session, m_theta ? m_theta->version : 0};
    auto reply = m_connection->call<net::HeartbeatReply>(request, int(m_intervalMs));
    if (reply)
        m_serverVersion = reply->version;
    return reply;
}

Status AgentLoop::cycle()
{
    if (m_pending) {
        if (Status submitted = submitPending(); !submitted)
            return submitted;
        if (limitsReached())
            return Status::success();
    }
    if (!m_theta || m_theta->version != m_serverVersion) {
        setPhase("syncing");
        if (Status synced = syncTheta(); !synced)
            return synced;
    }
    if (!m_startVersion)
        m_startVersion = m_theta->version;
    if (limitsReached() || stopping())
        return Status::success();
    if (m_options.beforeTask) {
        m_options.beforeTask();
        if (stopping())
            return Status::success();
    }
    std::optional<net::Task> task;
    if (Status obtained = obtainTask(task); !obtained)
        return obtained;
    if (!task)
        return Status::success();
    return trainTask(*task);
}

Status AgentLoop::waitForWork(uint64_t retryAfterMs)
{
    // Heartbeats tell when the round closes ("version" moves) or when work
    // is available again ("train"); the server's retry hint sets the pace.
    // A version_published event ends the wait at once.
    const uint64_t pollMs = std::clamp<uint64_t>(retryAfterMs, 100, m_intervalMs);
    Liveness liveness(m_liveness);
    setPhase("waiting");
    while (!stopping()) {
        if (m_events) {
            const auto until = Clock::now() + std::chrono::milliseconds(pollMs);
            bool published = false;
            while (!published && !stopping() && Clock::now() < until) {
                const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
                const ProjectEvents seen = m_events->wait(int(std::min<int64_t>(left.count(), 50)));
                published = seen.publishedVersion && m_theta && *seen.publishedVersion > m_theta->version;
            }
        } else {
            sleepFor(pollMs);
        }
        auto reply = heartbeat();
        if (!reply) {
            if (isConnectionError(reply.error()) && !liveness.missed())
                continue;
            return reply.error();
        }
        liveness.answered();
        if (!m_theta || reply->version != m_theta->version || reply->state == net::kStateTrain)
            return Status::success();
    }
    return Status::success();
}

bool AgentLoop::limitsReached() const
{
    if (m_options.maxTasks > 0 && m_summary.tasks >= m_options.maxTasks)
        return true;
    if (m_options.maxRounds > 0 && m_startVersion && m_theta
        && m_theta->version >= *m_startVersion + m_options.maxRounds)
        return true;
    return false;
}

void AgentLoop::leave()
{
    if (!m_joined || !m_connection)
        return;
    auto reply = m_connection->call<net::LeaveReply>(net::LeaveRequest{m_options.project, m_join.session}, 1000);
    if (reply)
        log("left %s", m_options.project.c_str());
    m_joined = false;
}

} // namespace crowdtrain::volunteer
