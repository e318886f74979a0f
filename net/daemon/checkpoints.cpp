#include "net/daemon/checkpoints.h"
#include "core/thread_name.h"

#include "net/control/control_names.h"
#include "net/control/utf8_text.h"
#include "net/wire/error_codes.h"
#include "net/wire/text_checks.h"

#include <algorithm>
#include <chrono>

namespace crowdtrain::daemon {

using control::DownloadState;

namespace {

Status checkName(const std::string& project)
{
    if (!net::isProjectName(project))
        return Error::make(control::errc::kBadRequest,
            "not a project name (1 to 64 of a-z, 0-9 and -): \"" + control::toValidUtf8(project, 80) + "\"");
    return Status::success();
}

// A download's name and part folder, checked before its job is looked up.
Status checkDownload(const CheckpointFolders& folders, const std::string& project, uint64_t round)
{
    if (Status named = checkName(project); !named)
        return named;
    return folders.contained(folders.partOf(project, round));
}

Error noDownload(const std::string& project, uint64_t round)
{
    return Error::make(control::errc::kNotFound, "no download of " + project + " round " + std::to_string(round));
}

} // namespace

Checkpoints::Checkpoints(HubDirectory& hubs, CheckpointsOptions options)
    : m_hubs(hubs)
    , m_options(std::move(options))
    , m_folders(m_options.root, [this](const std::string& text) {
        if (m_options.notice)
            m_options.notice(text);
        else if (m_options.log)
            m_options.log(text);
    })
{
    std::error_code ec;
    std::filesystem::create_directories(m_options.root, ec);
    for (const SavedDownload& saved : m_folders.savedDownloads()) {
        Job j;
        j.link = saved.link;
        j.project = saved.project;
        j.round = saved.round;
        j.paused = saved.paused;
        j.state = j.paused ? DownloadState::Paused : DownloadState::Queued;
        m_jobs[key(j.project, j.round)] = j;
    }
    m_worker = std::thread([this] {
        core::nameThisThread("checkpoints");
        work();
    });
}

Checkpoints::~Checkpoints()
{
    {
        std::lock_guard lock(m_mutex);
        m_stopping = true;
    }
    m_cancel = true;
    m_wake.notify_all();
    m_worker.join();
}

std::string Checkpoints::key(const std::string& project, uint64_t round)
{
    return project + "/" + std::to_string(round);
}

Result<control::Value> Checkpoints::list(const HubLink& hub, const std::string& project)
{
    if (Status named = checkName(project); !named)
        return named.error();
    auto reply = m_hubs.call<net::ListCheckpointsReply>(hub, net::ListCheckpointsRequest{project}, 5000);
    std::vector<net::CheckpointInfo> remote;
    if (reply)
        remote = reply->checkpoints;
    control::Value list = control::Value::array();
    std::lock_guard lock(m_mutex);
    for (const net::CheckpointInfo& c : remote) {
        uint64_t bytes = 0;
        bool torrent = false;
        for (const net::FileInfo& f : c.files) {
            bytes += f.bytes;
            torrent = torrent || f.torrent.has_value();
        }
        control::Value item = control::Value::map();
        item.set("round", c.round).set("version", c.version).set("tokens", c.tokens);
        item.set("val_loss", c.valLoss ? control::Value(*c.valLoss) : control::Value());
        item.set("created_ms", c.createdMs).set("bytes", bytes).set("torrent", torrent);
        std::error_code ec;
        DownloadState state = DownloadState::Remote;
        if (std::filesystem::exists(m_folders.folderOf(project, c.round), ec)) {
            state = DownloadState::Ready;
            item.set("folder", m_folders.folderOf(project, c.round).string());
            if (m_options.swarm)
                if (control::Value shared = m_options.swarm->folderStatus(m_folders.folderOf(project, c.round));
                    !shared.isNil())
                    for (const auto& [name, value] : shared.entries())
                        item.set(name, value);
        }
        if (auto job = m_jobs.find(key(project, c.round)); job != m_jobs.end()) {
            state = job->second.state;
            item.set("done_bytes", job->second.doneBytes).set("bytes_per_second", job->second.bytesPerSecond);
            item.set("error", job->second.error);
            if (job->second.fromPeers + job->second.fromHub > 0 || job->second.peers > 0) {
                item.set("peers", int64_t(job->second.peers)).set("from_peers_bytes", job->second.fromPeers);
                item.set("from_hub_bytes", job->second.fromHub);
            }
        }
        item.set("state", control::wireName(state));
        for (const net::FileInfo& f : c.files) {
            if (f.name != "samples.json")
                continue;
            control::Value samples = m_folders.readSamples(project, c.round);
            if (!samples.isNil()) {
                item.set("samples", std::move(samples));
            } else if (m_samplesQueued.insert(key(project, c.round)).second) {
                m_sampleFetches.push_back(SampleFetch{hub, project, c.round, f});
                m_wake.notify_all();
            }
        }
        list.push(std::move(item));
    }
    if (!reply && remote.empty())
        return Error::make(
            reply.error().code, "cannot list the checkpoints of " + project + ": " + reply.error().message);
    return list;
}

Status Checkpoints::download(const std::string& hub, const std::string& project, uint64_t round)
{
    if (Status named = checkName(project); !named)
        return named;
    std::error_code ec;
    if (std::filesystem::exists(m_folders.folderOf(project, round), ec))
        return Status::success();
    const std::filesystem::path part = m_folders.partOf(project, round);
    if (Status inside = m_folders.contained(part); !inside)
        return inside;
    std::filesystem::create_directories(part, ec);
    if (ec)
        return Error::make(net::errc::kIoError, part.string() + ": " + ec.message());
    if (Status s = m_folders.writeJob({hub, project, round, false}); !s)
        return s;
    {
        std::lock_guard lock(m_mutex);
        Job& j = m_jobs[key(project, round)];
        if (j.state == DownloadState::Downloading)
            return Status::success();
        j.link = hub;
        j.project = project;
        j.round = round;
        j.state = DownloadState::Queued;
        j.paused = false;
        j.retryAtMs = 0;
        j.error.clear();
        publishJob(j);
    }
    m_wake.notify_all();
    return Status::success();
}

void Checkpoints::retryNow(const std::string& hub)
{
    {
        std::lock_guard lock(m_mutex);
        for (auto& [k, job] : m_jobs)
            if (job.link == hub && job.state == DownloadState::Waiting)
                job.retryAtMs = 0;
    }
    m_wake.notify_all();
}

Status Checkpoints::pauseDownload(const std::string& project, uint64_t round, bool paused)
{
    if (Status s = checkDownload(m_folders, project, round); !s)
        return s;
    std::lock_guard lock(m_mutex);
    auto it = m_jobs.find(key(project, round));
    if (it == m_jobs.end())
        return noDownload(project, round);
    if (it->second.state == DownloadState::Cancelling)
        return Status::success(); // going away: a pause would keep its folder
    it->second.paused = paused;
    if (it->second.state == DownloadState::Downloading && paused)
        m_cancel = true; // stops at the next chunk; the part files stay
    else
        it->second.state = paused ? DownloadState::Paused : DownloadState::Queued;
    (void)m_folders.writeJob({it->second.link, project, round, paused});
    publishJob(it->second);
    m_wake.notify_all();
    return Status::success();
}

Status Checkpoints::cancel(const std::string& project, uint64_t round)
{
    if (Status s = checkDownload(m_folders, project, round); !s)
        return s;
    {
        std::lock_guard lock(m_mutex);
        auto it = m_jobs.find(key(project, round));
        if (it == m_jobs.end())
            return noDownload(project, round);
        if (it->second.state == DownloadState::Downloading) {
            it->second.state = DownloadState::Cancelling;
            m_cancel = true;
            return Status::success(); // the worker removes the folder
        }
        Job job = it->second;
        job.state = DownloadState::Cancelled;
        publishJob(job);
        m_jobs.erase(it);
    }
    std::error_code ec;
    std::filesystem::remove_all(m_folders.partOf(project, round), ec);
    return Status::success();
}

Status Checkpoints::remove(const std::string& project, uint64_t round)
{
    if (Status named = checkName(project); !named)
        return named;
    std::error_code ec;
    if (!std::filesystem::exists(m_folders.folderOf(project, round), ec))
        return Error::make(
            control::errc::kNotFound, project + " round " + std::to_string(round) + " is not downloaded");
    if (Status inside = m_folders.contained(m_folders.folderOf(project, round)); !inside)
        return inside;
    if (m_options.swarm)
        m_options.swarm->forget(m_folders.folderOf(project, round)); // stops seeding before the files go
    std::filesystem::remove_all(m_folders.folderOf(project, round), ec);
    if (ec)
        return Error::make(net::errc::kIoError, m_folders.folderOf(project, round).string() + ": " + ec.message());
    return Status::success();
}

Result<uint64_t> Checkpoints::generate(GenerateRequest request)
{
    if (Status named = checkName(request.project); !named)
        return named.error();
    if (Status inside = m_folders.contained(m_folders.folderOf(request.project, request.round)); !inside)
        return inside.error();
    std::error_code ec;
    if (!std::filesystem::exists(m_folders.folderOf(request.project, request.round) / "model.safetensors", ec))
        return Error::make(control::errc::kNotDownloaded,
            request.project + " round " + std::to_string(request.round) + " is not downloaded: download it first");
    if (request.prompt.empty())
        return Error::make(control::errc::kBadValue, "the prompt is empty");
    std::lock_guard lock(m_mutex);
    const uint64_t id = m_nextGeneration++;
    m_generations.emplace_back(id, std::move(request));
    m_wake.notify_all();
    return id;
}

void Checkpoints::publishJob(const Job& job)
{
    control::Value body = control::Value::map();
    body.set("project", job.project).set("round", job.round).set("state", control::wireName(job.state));
    body.set("done_bytes", job.doneBytes).set("bytes", job.totalBytes).set("bytes_per_second", job.bytesPerSecond);
    body.set("error", job.error);
    if (job.fromPeers + job.fromHub > 0 || job.peers > 0) {
        body.set("peers", int64_t(job.peers)).set("from_peers_bytes", job.fromPeers);
        body.set("from_hub_bytes", job.fromHub);
    }
    if (job.retryAtMs)
        body.set("retry_at_ms", job.retryAtMs);
    m_options.publish(control::event::kDownload, body);
}

void Checkpoints::runSampleFetch(const SampleFetch& fetch)
{
    const std::filesystem::path target = m_folders.samplesFileOf(fetch.project, fetch.round);
    std::error_code ec;
    std::filesystem::create_directories(target.parent_path(), ec);
    auto client = m_hubs.connect(fetch.hub);
    Status fetched = client ? Status::success() : Status(client.error());
    if (client) {
        const std::filesystem::path part = target.string() + ".part";
        auto sha256 = fetchResource(
            **client, fetch.file.resource, part, {fetch.project, 10000, m_options.throttle.get(), &m_cancel, {}});
        if (!sha256)
            fetched = sha256.error();
        else if (*sha256 != fetch.file.sha256)
            fetched = Error::make(net::errc::kChecksumMismatch, "samples.json is not the file the hub listed");
        else
            std::filesystem::rename(part, target, ec);
        if (!fetched || ec)
            std::filesystem::remove(part, ec);
    }
    if (!fetched) {
        // Asked for again by the next list().
        std::lock_guard lock(m_mutex);
        m_samplesQueued.erase(key(fetch.project, fetch.round));
        if (m_options.log)
            m_options.log("samples of " + fetch.project + " round " + std::to_string(fetch.round)
                + " not fetched: " + fetched.error().message);
        return;
    }
    if (m_options.publish) {
        control::Value body = control::Value::map();
        body.set("project", fetch.project).set("round", fetch.round);
        body.set("samples", m_folders.readSamples(fetch.project, fetch.round));
        m_options.publish(control::event::kSamples, body);
    }
}

void Checkpoints::work()
{
    std::unique_lock lock(m_mutex);
    while (!m_stopping) {
        if (!m_sampleFetches.empty()) {
            SampleFetch fetch = std::move(m_sampleFetches.front());
            m_sampleFetches.pop_front();
            m_cancel = false;
            lock.unlock();
            runSampleFetch(fetch);
            lock.lock();
            continue;
        }
        if (!m_generations.empty()) {
            auto [id, request] = std::move(m_generations.front());
            m_generations.pop_front();
            lock.unlock();
            GenerateHooks hooks;
            hooks.emit = [this](const control::Value& body) { m_options.publish(control::event::kGenerated, body); };
            hooks.generating = m_options.generating;
            hooks.keepGoing = [this] {
                std::lock_guard stopLock(m_mutex);
                return !m_stopping;
            };
            generateText(m_folders.folderOf(request.project, request.round), request, id, hooks);
            lock.lock();
            continue;
        }
        const int64_t now = unixNowMs();
        Job* next = nullptr;
        int64_t wakeAt = INT64_MAX;
        for (auto& [k, job] : m_jobs) {
            if (job.paused || job.state == DownloadState::Failed)
                continue;
            if (job.retryAtMs <= now) {
                next = &job;
                break;
            }
            wakeAt = std::min(wakeAt, job.retryAtMs);
        }
        if (!next) {
            if (wakeAt == INT64_MAX)
                m_wake.wait(lock);
            else
                m_wake.wait_for(lock, std::chrono::milliseconds(wakeAt - now));
            continue;
        }
        next->state = DownloadState::Downloading;
        m_cancel = false;
        Job job = *next;
        publishJob(job);
        lock.unlock();
        runDownload(job);
        lock.lock();
    }
}

void Checkpoints::runDownload(Job job)
{
    // noSpace: waiting for a full disk to have room (retried at the shortest backoff).
    auto finish = [&](DownloadState state, const std::string& error, bool noSpace = false) {
        std::lock_guard lock(m_mutex);
        auto it = m_jobs.find(key(job.project, job.round));
        if (it == m_jobs.end())
            return;
        Job& j = it->second;
        if (j.state == DownloadState::Cancelling) {
            std::error_code ec;
            std::filesystem::remove_all(m_folders.partOf(job.project, job.round), ec);
            j.state = DownloadState::Cancelled;
            publishJob(j);
            m_jobs.erase(it);
            return;
        }
        j.doneBytes = job.doneBytes;
        j.totalBytes = job.totalBytes;
        const bool news = j.error != error;
        j.error = error;
        if (state == DownloadState::Waiting) {
            // A full disk may have room again at any time: no longer waits.
            j.backoffMs
                = j.backoffMs && !noSpace ? std::min(j.backoffMs * 2, m_options.retryMaxMs) : m_options.retryMinMs;
            j.retryAtMs = unixNowMs() + j.backoffMs;
            if (m_options.log && news) // said once, not at every try
                m_options.log(job.project + " round " + std::to_string(job.round) + ": download waits, tried again in "
                    + std::to_string(j.backoffMs / 1000) + " s: " + error);
            j.state = DownloadState::Waiting;
        } else {
            j.state = j.paused && state != DownloadState::Ready ? DownloadState::Paused : state;
        }
        publishJob(j);
        if (j.state == DownloadState::Ready)
            m_jobs.erase(it);
    };

    // The hub as it is now: the demo hub's port changes at each start.
    Result<HubLink> hub = m_options.resolve ? m_options.resolve(job.link) : parseHubLink(job.link);
    if (!hub)
        return finish(DownloadState::Waiting, hub.error().message);
    const std::filesystem::path part = m_folders.partOf(job.project, job.round);
    CheckpointFetch fetch{job.project, job.round, part, m_options.throttle.get(), &m_cancel,
        [&](uint64_t done, uint64_t total, double bytesPerSecond) {
            job.doneBytes = done;
            job.totalBytes = total;
            job.bytesPerSecond = bytesPerSecond;
            std::lock_guard lock(m_mutex);
            if (auto it = m_jobs.find(key(job.project, job.round)); it != m_jobs.end()) {
                it->second.doneBytes = done;
                it->second.totalBytes = total;
                it->second.bytesPerSecond = bytesPerSecond;
                publishJob(it->second);
            }
        },
        m_options.swarm, {}, m_options.log};
    fetch.sources = [&](const SwarmSources& sources) {
        std::lock_guard lock(m_mutex);
        if (auto it = m_jobs.find(key(job.project, job.round)); it != m_jobs.end()) {
            it->second.fromPeers = sources.fromPeers;
            it->second.fromHub = sources.fromHub;
            it->second.peers = sources.peers;
        }
    };
    const FetchOutcome outcome = fetchCheckpoint(m_hubs, *hub, fetch);
    if (outcome.totalBytes)
        job.totalBytes = *outcome.totalBytes;
    if (outcome.verdict != FetchOutcome::Done)
        return finish(outcome.verdict == FetchOutcome::Failed ? DownloadState::Failed : DownloadState::Waiting,
            outcome.error, outcome.verdict == FetchOutcome::NoSpace);
    std::error_code ec;
    if (Status inside = m_folders.contained(m_folders.folderOf(job.project, job.round)); !inside)
        return finish(DownloadState::Failed, inside.error().message);
    std::filesystem::remove(part / "job.json", ec);
    std::filesystem::rename(part, m_folders.folderOf(job.project, job.round), ec);
    if (ec)
        return finish(DownloadState::Failed, "cannot move the checkpoint into place: " + ec.message());
    if (m_options.log)
        m_options.log(job.project + " round " + std::to_string(job.round) + " downloaded and verified (SHA-256) into "
            + m_folders.folderOf(job.project, job.round).string());
    if (m_options.swarm)
        m_options.swarm->adopt(job.link, job.project, m_folders.folderOf(job.project, job.round));
    job.doneBytes = job.totalBytes;
    finish(DownloadState::Ready, "");
}

} // namespace crowdtrain::daemon
