#include "net/daemon/poller.h"

#include "core/thread_name.h"
#include "net/control/control_names.h"

namespace crowdtrain::daemon {

using control::Value;

Poller::Poller(PollerParts parts)
    : m_parts(std::move(parts))
    , m_background(1)
    , m_thread([this] {
        core::nameThisThread("hub-poller");
        loop();
    })
{ }

Poller::~Poller()
{
    stop();
    if (m_thread.joinable())
        m_thread.join();
}

void Poller::stop()
{
    {
        std::lock_guard lock(m_mutex);
        m_stopping = true;
    }
    m_wake.notify_all();
    m_background.stop();
}

void Poller::beatNow()
{
    {
        std::lock_guard lock(m_mutex);
        m_beatNow = true;
    }
    m_wake.notify_all();
}

void Poller::loop()
{
    auto nextRefresh = std::chrono::steady_clock::now();
    std::unique_lock lock(m_mutex);
    while (!m_stopping) {
        m_wake.wait_for(lock, std::chrono::milliseconds(m_parts.pollMs), [&] { return m_stopping || m_beatNow; });
        if (m_stopping)
            break;
        m_beatNow = false;
        lock.unlock();
        const StatusInputs now = m_parts.joined.tick();
        if (now.summary)
            m_parts.history.addMachineRow(machineRow(now));
        const std::string text = stateText(now);
        Value progress = m_parts.status();
        if (text != m_lastStateText) {
            m_lastStateText = text;
            m_parts.publish(control::event::kState, progress);
        }
        m_parts.publish(control::event::kProgress, progress);

        if (std::chrono::steady_clock::now() >= nextRefresh) {
            nextRefresh = std::chrono::steady_clock::now() + std::chrono::milliseconds(m_parts.hubRefreshMs);
            // Off this thread: hubs that do not answer (2 s each) must not
            // hold the status events up.
            if (!m_refreshing.exchange(true) && !m_background.post([this] {
                    refreshHubs();
                    m_refreshing = false;
                }))
                m_refreshing = false;
        }
        lock.lock();
    }
}

void Poller::refreshHubs()
{
    m_parts.hubs.refresh(2000);
    const JoinedProject::Joined joined = m_parts.joined.joined();
    if (!joined.runner)
        return;
    const std::string& project = joined.project;
    const HubLink& hub = joined.runner->hub;
    const uint64_t since = m_parts.history.nextMetricRound();
    auto rows = m_parts.hubs.call<net::MetricsReply>(hub, net::MetricsRequest{project, since, 4096}, 3000);
    if (rows && !rows->rows.empty()) {
        if (m_parts.joined.joined().project != project) // joined another project meanwhile
            return;
        Value body = Value::map();
        body.set("project", project).set("rows", m_parts.history.addMetrics(rows->rows));
        m_parts.publish(control::event::kMetrics, body);
    }
    announceCheckpoint(hub, joined.runner->hubLink, project);
}

void Poller::announceCheckpoint(const HubLink& hub, const std::string& hubText, const std::string& project)
{
    // A new checkpoint: tell, and fetch it when the settings say so.
    auto list = m_parts.hubs.call<net::ListCheckpointsReply>(hub, net::ListCheckpointsRequest{project}, 3000);
    if (!list || list->checkpoints.empty())
        return;
    const net::CheckpointInfo& newest = list->checkpoints.back();
    const auto local = m_parts.checkpoints.folders().newestLocal(project);
    uint64_t bytes = 0;
    for (const auto& f : newest.files)
        bytes += f.bytes;
    if (local && *local >= newest.round)
        return;
    Value body = Value::map();
    body.set("project", project).set("round", newest.round).set("bytes", bytes);
    body.set("val_loss", newest.valLoss ? Value(*newest.valLoss) : Value());
    m_parts.publish(control::event::kCheckpointPublished, body);
    const Settings settings = m_parts.settings.get();
    if (settings.get(control::setting::kAutoDownload)
        && bytes <= uint64_t(settings.get(control::setting::kAutoDownloadMaxBytes)))
        (void)m_parts.checkpoints.download(hubText, project, newest.round);
}

} // namespace crowdtrain::daemon
