#include "net/daemon/checkpoints.h"

#include "engine/atomic_file.h"
#include "engine/generate.h"
#include "engine/model_io.h"
#include "engine/tokenizer.h"
#include "engine/utf8.h"
#include "net/control/control_names.h"
#include "net/control/utf8_text.h"
#include "net/daemon/state_file.h"
#include "net/transfer/socket_source.h"
#include "net/transport/atomic_write.h"
#include "net/wire/error_codes.h"
#include "net/wire/text_checks.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <sys/statvfs.h>

namespace crowdtrain::daemon {

namespace {

using json = nlohmann::json;

// A resource source whose chunks keep to the volunteer's download limit and
// count toward the month (net/limits/throttle.h).
class ThrottledSource : public net::ResourceSource {
public:
    ThrottledSource(net::ResourceSource& inner, limits::NetworkThrottle* throttle, const std::atomic<bool>* cancel)
        : m_inner(inner)
        , m_throttle(throttle)
        , m_cancel(cancel)
    { }
    Result<net::ResourceDescription> describe(const std::string& resource) override
    {
        return m_inner.describe(resource);
    }
    Result<std::string> fetch(const std::string& resource, uint64_t index) override
    {
        auto chunk = m_inner.fetch(resource, index);
        if (chunk && m_throttle)
            m_throttle->pass(limits::NetworkThrottle::Direction::Down, chunk->size(), m_cancel);
        return chunk;
    }

private:
    net::ResourceSource& m_inner;
    limits::NetworkThrottle* m_throttle;
    const std::atomic<bool>* m_cancel;
};
constexpr const char* kJobFile = "job.json";

bool temporary(const Error& error)
{
    return net::isConnectionError(error.code) || error.code == net::errc::kUnavailable;
}

Status checkName(const std::string& project)
{
    if (!net::isProjectName(project))
        return Error::make(control::errc::kBadRequest,
            "not a project name (1 to 64 of a-z, 0-9 and -): \"" + control::toValidUtf8(project, 80) + "\"");
    return Status::success();
}

// The job.json this class writes: {hub: text, project: name, round: uint, paused?: bool}.
std::string jobProblem(const json& job)
{
    for (const std::string& why :
        {expectString(job, "hub"), expectString(job, "project"), expectUnsigned(job, "round")})
        if (!why.empty())
            return why;
    if (!net::isProjectName(job["project"].get<std::string>()))
        return "\"project\" is not a project name";
    if (job.contains("paused") && !job["paused"].is_boolean())
        return "\"paused\" is not true or false";
    return "";
}

uint64_t freeBytes(const std::filesystem::path& dir)
{
    struct statvfs fs { };
    if (::statvfs(dir.c_str(), &fs) != 0)
        return UINT64_MAX;
    return uint64_t(fs.f_bavail) * fs.f_frsize;
}

} // namespace

Checkpoints::Checkpoints(HubDirectory& hubs, CheckpointsOptions options)
    : m_hubs(hubs)
    , m_options(std::move(options))
{
    std::error_code ec;
    std::filesystem::create_directories(m_options.root, ec);
    resumeJobs();
    m_worker = std::thread([this] { work(); });
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

std::filesystem::path Checkpoints::folderOf(const std::string& project, uint64_t round) const
{
    return m_options.root / project / ("round-" + std::to_string(round));
}

std::filesystem::path Checkpoints::partOf(const std::string& project, uint64_t round) const
{
    return m_options.root / project / (".round-" + std::to_string(round) + ".part");
}

void Checkpoints::notice(const std::string& text) const
{
    if (m_options.notice)
        m_options.notice(text);
    else if (m_options.log)
        m_options.log(text);
}

std::optional<uint64_t> Checkpoints::roundOf(
    const std::filesystem::path& path, std::string_view prefix, std::string_view suffix) const
{
    const std::string name = path.filename().string();
    std::optional<uint64_t> round;
    if (name.size() > prefix.size() + suffix.size() && name.starts_with(prefix) && name.ends_with(suffix)) {
        const std::string_view digits
            = std::string_view(name).substr(prefix.size(), name.size() - prefix.size() - suffix.size());
        uint64_t value = 0;
        const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
        // Exactly as std::to_string writes it: digits only, no leading zero.
        if (error == std::errc() && end == digits.data() + digits.size() && (digits.size() == 1 || digits[0] != '0'))
            round = value;
    }
    if (!round) {
        std::lock_guard lock(m_noticedMutex);
        if (m_noticed.insert(path.string()).second)
            notice("skipped " + path.string() + ": not a name the daemon writes (" + std::string(prefix) + "<round>"
                + std::string(suffix) + ")");
    }
    return round;
}

Status Checkpoints::contained(const std::filesystem::path& path) const
{
    std::error_code ec;
    const std::filesystem::path root = std::filesystem::weakly_canonical(m_options.root, ec);
    const std::filesystem::path resolved = ec ? path : std::filesystem::weakly_canonical(path, ec);
    if (!ec) {
        auto r = root.begin();
        auto p = resolved.begin();
        for (; r != root.end() && p != resolved.end() && *r == *p; ++r, ++p) { }
        if (r == root.end() && p != resolved.end())
            return Status::success();
    }
    return Error::make(net::errc::kIoError,
        path.string() + " resolves outside the checkpoints folder " + m_options.root.string() + "; refused");
}

void Checkpoints::resumeJobs()
{
    std::error_code ec;
    for (const auto& project : std::filesystem::directory_iterator(m_options.root, ec)) {
        const std::string projectName = project.path().filename().string();
        if (!project.is_directory(ec) || !net::isProjectName(projectName)) {
            std::lock_guard lock(m_noticedMutex);
            if (m_noticed.insert(project.path().string()).second)
                notice("skipped " + project.path().string() + ": not a project folder the daemon writes");
            continue;
        }
        std::error_code inner;
        for (const auto& entry : std::filesystem::directory_iterator(project.path(), inner)) {
            const std::string name = entry.path().filename().string();
            if (!name.starts_with(".round-") || !name.ends_with(".part"))
                continue;
            const auto round = roundOf(entry.path(), ".round-", ".part");
            if (!round)
                continue;
            std::string why;
            const auto job = readStateFile(
                entry.path() / kJobFile, 1 << 16,
                [&](const json& root) {
                    if (std::string problem = jobProblem(root); !problem.empty())
                        return problem;
                    if (root["project"].get<std::string>() != projectName || root["round"].get<uint64_t>() != *round)
                        return std::string("it names another checkpoint than its folder");
                    return std::string();
                },
                why);
            if (!why.empty())
                notice(why);
            if (!job)
                continue;
            Job j;
            j.link = (*job)["hub"].get<std::string>();
            j.project = projectName;
            j.round = *round;
            j.paused = job->value("paused", false);
            j.state = j.paused ? "paused" : "queued";
            m_jobs[key(j.project, j.round)] = j;
        }
    }
}

std::optional<uint64_t> Checkpoints::newestLocal(const std::string& project) const
{
    std::optional<uint64_t> newest;
    std::error_code ec;
    if (!net::isProjectName(project))
        return newest;
    for (const auto& entry : std::filesystem::directory_iterator(m_options.root / project, ec)) {
        const std::string name = entry.path().filename().string();
        if (!name.starts_with("round-") || !std::filesystem::exists(entry.path() / "model.safetensors", ec))
            continue;
        const auto round = roundOf(entry.path(), "round-", "");
        if (round && (!newest || *round > *newest))
            newest = round;
    }
    return newest;
}

control::Value Checkpoints::local() const
{
    control::Value list = control::Value::array();
    std::error_code ec;
    for (const auto& project : std::filesystem::directory_iterator(m_options.root, ec)) {
        if (!net::isProjectName(project.path().filename().string()))
            continue; // resumeJobs() gave the notice
        std::error_code inner;
        for (const auto& entry : std::filesystem::directory_iterator(project.path(), inner)) {
            const std::string name = entry.path().filename().string();
            if (!name.starts_with("round-"))
                continue;
            const auto round = roundOf(entry.path(), "round-", "");
            if (!round)
                continue;
            control::Value item = control::Value::map();
            item.set("project", project.path().filename().string());
            item.set("round", *round);
            item.set("folder", entry.path().string());
            list.push(std::move(item));
        }
    }
    return list;
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
        for (const net::FileInfo& f : c.files)
            bytes += f.bytes;
        control::Value item = control::Value::map();
        item.set("round", c.round).set("version", c.version).set("tokens", c.tokens);
        item.set("val_loss", c.valLoss ? control::Value(*c.valLoss) : control::Value());
        item.set("created_ms", c.createdMs).set("bytes", bytes);
        std::error_code ec;
        std::string state = "remote";
        if (std::filesystem::exists(folderOf(project, c.round), ec)) {
            state = "ready";
            item.set("folder", folderOf(project, c.round).string());
        }
        if (auto job = m_jobs.find(key(project, c.round)); job != m_jobs.end()) {
            state = job->second.state;
            item.set("done_bytes", job->second.doneBytes).set("bytes_per_second", job->second.bytesPerSecond);
            item.set("error", job->second.error);
        }
        item.set("state", state);
        for (const net::FileInfo& f : c.files) {
            if (f.name != "samples.json")
                continue;
            control::Value samples = readSamples(project, c.round);
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
    if (std::filesystem::exists(folderOf(project, round), ec))
        return Status::success();
    const std::filesystem::path part = partOf(project, round);
    if (Status inside = contained(part); !inside)
        return inside;
    std::filesystem::create_directories(part, ec);
    if (ec)
        return Error::make(net::errc::kIoError, part.string() + ": " + ec.message());
    const json job = {{"hub", hub}, {"project", project}, {"round", round}};
    if (Status s = net::writeFileAtomic(part / kJobFile, job.dump()); !s)
        return s;
    {
        std::lock_guard lock(m_mutex);
        Job& j = m_jobs[key(project, round)];
        if (j.state == "downloading")
            return Status::success();
        j.link = hub;
        j.project = project;
        j.round = round;
        j.state = "queued";
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
            if (job.link == hub && job.state == "waiting")
                job.retryAtMs = 0;
    }
    m_wake.notify_all();
}

Status Checkpoints::pauseDownload(const std::string& project, uint64_t round, bool paused)
{
    if (Status named = checkName(project); !named)
        return named;
    if (Status inside = contained(partOf(project, round)); !inside)
        return inside;
    std::lock_guard lock(m_mutex);
    auto it = m_jobs.find(key(project, round));
    if (it == m_jobs.end())
        return Error::make(control::errc::kNotFound, "no download of " + project + " round " + std::to_string(round));
    it->second.paused = paused;
    if (it->second.state == "downloading" && paused)
        m_cancel = true; // stops at the next chunk; the part files stay
    else
        it->second.state = paused ? "paused" : "queued";
    json job = {{"hub", it->second.link}, {"project", project}, {"round", round}, {"paused", paused}};
    (void)net::writeFileAtomic(partOf(project, round) / kJobFile, job.dump());
    publishJob(it->second);
    m_wake.notify_all();
    return Status::success();
}

Status Checkpoints::cancel(const std::string& project, uint64_t round)
{
    if (Status named = checkName(project); !named)
        return named;
    if (Status inside = contained(partOf(project, round)); !inside)
        return inside;
    {
        std::lock_guard lock(m_mutex);
        auto it = m_jobs.find(key(project, round));
        if (it == m_jobs.end())
            return Error::make(
                control::errc::kNotFound, "no download of " + project + " round " + std::to_string(round));
        if (it->second.state == "downloading") {
            it->second.state = "cancelling";
            m_cancel = true;
            return Status::success(); // the worker removes the folder
        }
        Job job = it->second;
        job.state = "cancelled";
        publishJob(job);
        m_jobs.erase(it);
    }
    std::error_code ec;
    std::filesystem::remove_all(partOf(project, round), ec);
    return Status::success();
}

Status Checkpoints::remove(const std::string& project, uint64_t round)
{
    if (Status named = checkName(project); !named)
        return named;
    std::error_code ec;
    if (!std::filesystem::exists(folderOf(project, round), ec))
        return Error::make(
            control::errc::kNotFound, project + " round " + std::to_string(round) + " is not downloaded");
    if (Status inside = contained(folderOf(project, round)); !inside)
        return inside;
    std::filesystem::remove_all(folderOf(project, round), ec);
    if (ec)
        return Error::make(net::errc::kIoError, folderOf(project, round).string() + ": " + ec.message());
    return Status::success();
}

Result<uint64_t> Checkpoints::generate(GenerateRequest request)
{
    if (Status named = checkName(request.project); !named)
        return named.error();
    if (Status inside = contained(folderOf(request.project, request.round)); !inside)
        return inside.error();
    std::error_code ec;
    if (!std::filesystem::exists(folderOf(request.project, request.round) / "model.safetensors", ec))
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
    body.set("project", job.project).set("round", job.round).set("state", job.state);
    body.set("done_bytes", job.doneBytes).set("bytes", job.totalBytes).set("bytes_per_second", job.bytesPerSecond);
    body.set("error", job.error);
    if (job.retryAtMs)
        body.set("retry_at_ms", job.retryAtMs);
    m_options.publish(control::event::kDownload, body);
}

std::filesystem::path Checkpoints::samplesFileOf(const std::string& project, uint64_t round) const
{
    return m_options.root / project / "samples" / ("round-" + std::to_string(round) + ".json");
}

control::Value Checkpoints::readSamples(const std::string& project, uint64_t round) const
{
    auto text = engine::readWholeFile(samplesFileOf(project, round));
    if (!text)
        return {};
    const json doc = json::parse(*text, nullptr, false);
    if (!doc.is_object() || !doc.contains("samples") || !doc["samples"].is_array())
        return {};
    control::Value out = control::Value::array();
    for (const json& sample : doc["samples"]) {
        if (!sample.is_object() || !sample.contains("prompt") || !sample["prompt"].is_string()
            || !sample.contains("text") || !sample["text"].is_string())
            continue;
        control::Value item = control::Value::map();
        item.set("prompt", control::toValidUtf8(sample["prompt"].get<std::string>()));
        item.set("text", control::toValidUtf8(sample["text"].get<std::string>()));
        out.push(std::move(item));
    }
    return out;
}

void Checkpoints::runSampleFetch(const SampleFetch& fetch)
{

    const std::filesystem::path target = samplesFileOf(fetch.project, fetch.round);
    std::error_code ec;
    std::filesystem::create_directories(target.parent_path(), ec);
    auto client = m_hubs.connect(fetch.hub);
    Status fetched = client ? Status::success() : Status(client.error());
    if (client) {
        net::SocketSource socket(**client, fetch.project, 10000);
        ThrottledSource source(socket, m_options.throttle.get(), nullptr);
        net::DownloadOptions options;
        options.cancel = &m_cancel;
        const std::filesystem::path part = target.string() + ".part";
        auto report = net::Download(source, fetch.file.resource, part, options).run();
        if (!report)
            fetched = report.error();
        else if (report->description.sha256 != fetch.file.sha256)
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
        body.set("samples", readSamples(fetch.project, fetch.round));
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
            runGenerate(request, id);
            lock.lock();
            continue;
        }
        const int64_t now = unixNowMs();
        Job* next = nullptr;
        int64_t wakeAt = INT64_MAX;
        for (auto& [k, job] : m_jobs) {
            if (job.paused || job.state == "failed")
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
        next->state = "downloading";
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
    auto finish = [&](const std::string& state, const std::string& error) {
        std::lock_guard lock(m_mutex);
        auto it = m_jobs.find(key(job.project, job.round));
        if (it == m_jobs.end())
            return;
        Job& j = it->second;
        if (j.state == "cancelling") {
            std::error_code ec;
            std::filesystem::remove_all(partOf(job.project, job.round), ec);
            j.state = "cancelled";
            publishJob(j);
            m_jobs.erase(it);
            return;
        }
        j.doneBytes = job.doneBytes;
        j.totalBytes = job.totalBytes;
        j.error = error;
        if (state == "retry") {
            j.backoffMs = j.backoffMs ? std::min(j.backoffMs * 2, m_options.retryMaxMs) : m_options.retryMinMs;
            j.retryAtMs = unixNowMs() + j.backoffMs;
            j.state = "waiting";
        } else {
            j.state = j.paused && state != "ready" ? "paused" : state;
        }
        publishJob(j);
        if (j.state == "ready")
            m_jobs.erase(it);
    };

    // The hub as it is now: the demo hub's port changes at each start.
    Result<HubLink> hub = m_options.resolve ? m_options.resolve(job.link) : parseHubLink(job.link);
    if (!hub)
        return finish("retry", hub.error().message);
    auto list = m_hubs.call<net::ListCheckpointsReply>(*hub, net::ListCheckpointsRequest{job.project}, 10000);
    if (!list)
        return finish(temporary(list.error()) ? "retry" : "failed", list.error().message);
    const net::CheckpointInfo* info = nullptr;
    for (const net::CheckpointInfo& c : list->checkpoints)
        if (c.round == job.round)
            info = &c;
    if (!info)
        return finish("failed", "the hub no longer has round " + std::to_string(job.round) + " (retention)");
    job.totalBytes = 0;
    for (const net::FileInfo& f : info->files)
        job.totalBytes += f.bytes;
    const std::filesystem::path part = partOf(job.project, job.round);
    if (freeBytes(part) < job.totalBytes + (64u << 20))
        return finish("failed",
            "not enough free disk in " + part.string() + " for " + std::to_string(job.totalBytes >> 20) + " MiB");

    // The tokenizer, so the folder can generate text on its own.
    std::optional<net::ProjectInfo> project;
    if (auto entry = m_hubs.find(formatHubLink(*hub)))
        for (const net::ProjectInfo& p : entry->projects)
            if (p.name == job.project)
                project = p;
    auto client = m_hubs.connect(*hub);
    if (!client)
        return finish("retry", client.error().message);
    const auto started = std::chrono::steady_clock::now();
    uint64_t before = 0;
    auto fetchFile = [&](const std::string& resource, const std::filesystem::path& target, uint64_t bytes) -> Status {
        net::SocketSource socket(**client, job.project, 30000);
        ThrottledSource source(socket, m_options.throttle.get(), &m_cancel);
        net::DownloadOptions options;
        options.cancel = &m_cancel;
        options.progress = [&](uint64_t done, uint64_t) {
            job.doneBytes = before + done;
            const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
            job.bytesPerSecond = seconds > 0 ? double(job.doneBytes) / seconds : 0;
            std::lock_guard lock(m_mutex);
            if (auto it = m_jobs.find(key(job.project, job.round)); it != m_jobs.end()) {
                it->second.doneBytes = job.doneBytes;
                it->second.totalBytes = job.totalBytes;
                it->second.bytesPerSecond = job.bytesPerSecond;
                publishJob(it->second);
            }
        };
        auto report = net::Download(source, resource, target, options).run();
        if (!report)
            return report.error();
        before += bytes;
        return Status::success();
    };
    for (const net::FileInfo& file : info->files)
        if (Status s = fetchFile(file.resource, part / file.name, file.bytes); !s)
            return finish(s.error().code == net::errc::kCancelled || temporary(s.error()) ? "retry" : "failed",
                s.error().message);
    if (project) {
        std::error_code ec;
        std::filesystem::create_directories(part / "tokenizer", ec);
        for (const net::FileInfo& file : project->tokenizer)
            if (Status s = fetchFile(file.resource, part / "tokenizer" / file.name, 0); !s)
                return finish(temporary(s.error()) ? "retry" : "failed", s.error().message);
    }
    std::error_code ec;
    if (Status inside = contained(folderOf(job.project, job.round)); !inside)
        return finish("failed", inside.error().message);
    std::filesystem::remove(part / kJobFile, ec);
    std::filesystem::rename(part, folderOf(job.project, job.round), ec);
    if (ec)
        return finish("failed", "cannot move the checkpoint into place: " + ec.message());
    if (m_options.log)
        m_options.log(job.project + " round " + std::to_string(job.round) + " downloaded and verified (SHA-256) into "
            + folderOf(job.project, job.round).string());
    job.doneBytes = job.totalBytes;
    finish("ready", "");
}

void Checkpoints::runGenerate(const GenerateRequest& request, uint64_t id)
{
    auto emit = [&](const std::string& text, bool done, const std::string& error) {
        control::Value body = control::Value::map();
        body.set("id", id).set("project", request.project).set("round", request.round);
        body.set("text", text).set("done", done).set("error", error);
        m_options.publish(control::event::kGenerated, body);
    };
    const std::filesystem::path folder = folderOf(request.project, request.round);
    auto tokenizer = engine::loadTokenizer(folder / "tokenizer");
    if (!tokenizer)
        return emit("", true, "no tokenizer with this checkpoint: " + tokenizer.error().message);
    auto model = engine::loadModel(folder);
    if (!model)
        return emit("", true, model.error().message);
    const auto promptIds = (*tokenizer)->encode(request.prompt);
    if (promptIds.empty())
        return emit("", true, "the prompt encodes to no tokens");
    if (m_options.generating)
        m_options.generating(true);
    engine::SampleOptions options;
    options.maxNewTokens = std::clamp<int64_t>(request.maxTokens, 1, 4096);
    options.temperature = request.temperature;
    options.topK = request.topK;
    options.seed = request.seed;
    engine::Utf8Stream text;
    std::string pending;
    auto lastSent = std::chrono::steady_clock::now();
    try {
        engine::generate(*model, std::vector<int64_t>(promptIds.begin(), promptIds.end()), options, [&](int64_t token) {
            const int32_t one = int32_t(token);
            pending += text.push((*tokenizer)->decode(std::span<const int32_t>(&one, 1)));
            const auto now = std::chrono::steady_clock::now();
            if (!pending.empty() && now - lastSent > std::chrono::milliseconds(50)) {
                emit(pending, false, "");
                pending.clear();
                lastSent = now;
            }
            std::lock_guard lock(m_mutex);
            return !m_stopping;
        });
    } catch (const std::exception& e) {
        if (m_options.generating)
            m_options.generating(false);
        return emit(pending, true, std::string("generation failed: ") + e.what());
    }
    pending += text.finish();
    if (m_options.generating)
        m_options.generating(false);
    emit(pending, true, "");
}

} // namespace crowdtrain::daemon
