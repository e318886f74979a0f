#include "net/daemon/checkpoint_transfer.h"

#include "core/file_io.h"
#include "net/core_link/core_process.h"
#include "net/daemon/checkpoint_swarm.h"
#include "net/transfer/download.h"
#include "net/transfer/socket_source.h"
#include "net/wire/error_codes.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <sys/statvfs.h>

namespace crowdtrain::daemon {

namespace {

// A resource source whose chunks keep to the volunteer's download limit and
// count toward the month (net/limits/throttle.h). Each chunk's bytes are
// reserved before it is asked for: a chunk is up to 1 MiB, so paying after
// it came let a small file arrive at full speed and the wait follow it.
class ThrottledSource : public net::ResourceSource {
public:
    ThrottledSource(net::ResourceSource& inner, limits::NetworkThrottle* throttle, const std::atomic<bool>* cancel)
        : m_inner(inner)
        , m_throttle(throttle)
        , m_cancel(cancel)
    { }
    Result<net::ResourceDescription> describe(const std::string& resource) override
    {
        auto description = m_inner.describe(resource);
        if (description)
            m_description = *description;
        return description;
    }
    Result<std::string> fetch(const std::string& resource, uint64_t index) override
    {
        if (!m_throttle)
            return m_inner.fetch(resource, index);
        if (m_throttle->capReached())
            return Error::make(net::errc::kUnavailable, "this month's data cap is reached (the limits' setting)");
        using Direction = limits::NetworkThrottle::Direction;
        const uint64_t expected
            = m_description && index < m_description->chunkCount ? m_description->chunkLength(index) : 0;
        if (!m_throttle->reserve(Direction::Down, expected, m_cancel))
            return Error::make(net::errc::kCancelled, "cancelled");
        auto chunk = m_inner.fetch(resource, index);
        m_throttle->settle(Direction::Down, expected, chunk ? chunk->size() : 0);
        return chunk;
    }

private:
    net::ResourceSource& m_inner;
    limits::NetworkThrottle* m_throttle;
    const std::atomic<bool>* m_cancel;
    std::optional<net::ResourceDescription> m_description; // of the resource being fetched
};

bool temporary(const Error& error)
{
    return net::isConnectionError(error.code) || error.code == net::errc::kUnavailable;
}

std::string sizeText(uint64_t bytes)
{
    return bytes >= (10u << 20) ? std::to_string(bytes >> 20) + " MiB" : std::to_string((bytes + 1023) >> 10) + " KiB";
}

uint64_t freeBytes(const std::filesystem::path& dir)
{
    struct statvfs fs { };
    if (::statvfs(dir.c_str(), &fs) != 0)
        return UINT64_MAX;
    return uint64_t(fs.f_bavail) * fs.f_frsize;
}

// What a download leaves free on the disk beyond its files.
constexpr uint64_t kSpareBytes = 64u << 20;

// The bytes a download's part folder already holds.
uint64_t partBytes(const std::filesystem::path& part)
{
    uint64_t bytes = 0;
    std::error_code ec;
    for (const auto& entry : std::filesystem::recursive_directory_iterator(part, ec))
        if (entry.is_regular_file(ec))
            bytes += entry.file_size(ec);
    return bytes;
}

FetchOutcome failed(const std::string& error)
{
    return {FetchOutcome::Failed, error, std::nullopt};
}

FetchOutcome retryOrFail(const Error& error)
{
    if (core::isDiskFull(error))
        return {FetchOutcome::NoSpace, error.message, std::nullopt};
    return {temporary(error) ? FetchOutcome::Retry : FetchOutcome::Failed, error.message, std::nullopt};
}

FetchOutcome withTotal(uint64_t totalBytes, FetchOutcome outcome)
{
    outcome.totalBytes = totalBytes;
    return outcome;
}

} // namespace

FetchOutcome fetchCheckpoint(const HubDirectory& hubs, const HubLink& hub, const CheckpointFetch& fetch)
{
    auto list = hubs.call<net::ListCheckpointsReply>(hub, net::ListCheckpointsRequest{fetch.project}, 10000);
    if (!list)
        return retryOrFail(list.error());
    const net::CheckpointInfo* info = nullptr;
    for (const net::CheckpointInfo& c : list->checkpoints)
        if (c.round == fetch.round)
            info = &c;
    if (!info)
        return failed("the hub no longer has round " + std::to_string(fetch.round) + " (retention)");
    uint64_t totalBytes = 0;
    for (const net::FileInfo& f : info->files)
        totalBytes += f.bytes;
    // The files and a margin for everything else on the disk; the files
    // already there (a download that resumes) are not counted twice.
    const uint64_t needed = totalBytes - std::min(totalBytes, partBytes(fetch.part)) + kSpareBytes;
    if (const uint64_t free = freeBytes(fetch.part); free < needed)
        return withTotal(totalBytes,
            {FetchOutcome::NoSpace,
                "not enough free disk in " + fetch.part.parent_path().string() + " for " + sizeText(totalBytes) + " ("
                    + sizeText(free) + " free, " + sizeText(kSpareBytes) + " kept spare): tried again until there is",
                std::nullopt});

    std::optional<net::ProjectInfo> project;
    if (auto entry = hubs.find(formatHubLink(hub)))
        for (const net::ProjectInfo& p : entry->projects)
            if (p.name == fetch.project)
                project = p;
    auto client = hubs.connect(hub);
    if (!client)
        return {FetchOutcome::Retry, client.error().message, totalBytes};
    const auto started = std::chrono::steady_clock::now();
    uint64_t before = 0;
    auto fetchFile = [&](const std::string& resource, const std::filesystem::path& target, uint64_t bytes) -> Status {
        FetchOptions options{
            fetch.project, 30000, fetch.throttle, fetch.cancel, [&](uint64_t done) {
                const double seconds
                    = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
                if (fetch.progress)
                    fetch.progress(before + done, totalBytes, seconds > 0 ? double(before + done) / seconds : 0);
            }};
        auto sha256 = fetchResource(**client, resource, target, options);
        if (!sha256)
            return sha256.error();
        before += bytes;
        return Status::success();
    };
    for (const net::FileInfo& file : info->files) {
        if (file.torrent && fetch.swarm) {
            const SwarmDownload swarmed = fetch.swarm->download(hub, fetch.project, file, fetch.part / file.name,
                fetch.cancel, [&](uint64_t done, const SwarmSources& sources) {
                    const double seconds
                        = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
                    if (fetch.progress)
                        fetch.progress(before + done, totalBytes, seconds > 0 ? double(before + done) / seconds : 0);
                    if (fetch.sources)
                        fetch.sources(sources);
                });
            if (swarmed.verdict == SwarmDownload::Done) {
                before += file.bytes;
                if (fetch.log)
                    fetch.log(fetch.project + " round " + std::to_string(fetch.round) + ": " + file.name
                        + " from the swarm (" + std::to_string(swarmed.sources.fromPeers >> 10) + " KiB from peers, "
                        + std::to_string(swarmed.sources.fromHub >> 10) + " KiB from the hub)");
                continue;
            }
            if (swarmed.verdict == SwarmDownload::Cancelled)
                return withTotal(totalBytes, {FetchOutcome::Retry, "cancelled", std::nullopt});
            if (fetch.log)
                fetch.log(fetch.project + " round " + std::to_string(fetch.round) + ": " + file.name
                    + " in chunks from the hub instead of the swarm: " + swarmed.why);
        }
        if (Status s = fetchFile(file.resource, fetch.part / file.name, file.bytes); !s)
            return withTotal(totalBytes,
                s.error().code == net::errc::kCancelled
                    ? FetchOutcome{FetchOutcome::Retry, s.error().message, std::nullopt}
                    : retryOrFail(s.error()));
    }
    if (project) {
        std::error_code ec;
        std::filesystem::create_directories(fetch.part / "tokenizer", ec);
        for (const net::FileInfo& file : project->tokenizer)
            if (Status s = fetchFile(file.resource, fetch.part / "tokenizer" / file.name, 0); !s)
                return withTotal(totalBytes, retryOrFail(s.error()));
    }
    return {FetchOutcome::Done, "", totalBytes};
}

Result<std::string> fetchResource(
    net::Client& client, const std::string& resource, const std::filesystem::path& target, const FetchOptions& options)
{
    net::SocketSource socket(client, options.project, options.timeoutMs);
    ThrottledSource source(socket, options.throttle, options.cancel);
    net::DownloadOptions download;
    download.cancel = options.cancel;
    if (options.progress)
        download.progress = [&](uint64_t done, uint64_t) { options.progress(done); };
    auto report = net::Download(source, resource, target, download).run();
    if (!report)
        return report.error();
    return report->description.sha256;
}

void generateText(
    const std::filesystem::path& folder, const GenerateRequest& request, uint64_t id, const GenerateHooks& hooks)
{
    auto emit = [&](const std::string& text, bool done, const std::string& error) {
        control::Value body = control::Value::map();
        body.set("id", id).set("project", request.project).set("round", request.round);
        body.set("text", text).set("done", done).set("error", error);
        hooks.emit(body);
    };
    // Sampling runs in a training core of its own (docs/protocol.md §13.4),
    // ended when the text is done or no longer wanted: a fault in it never
    // reaches the daemon.
    auto core = corelink::CoreProcess::start({.binary = hooks.coreBinary});
    if (!core)
        return emit("", true, core.error().message);
    corelink::GenerateRequest ask;
    ask.folder = folder.string();
    ask.prompt = request.prompt;
    ask.maxTokens = uint64_t(std::clamp<int64_t>(request.maxTokens, 1, 4096));
    ask.temperature = request.temperature;
    ask.topK = uint64_t(std::max<int64_t>(0, request.topK));
    ask.seed = request.seed;
    corelink::CoreChannel& channel = (*core)->channel();
    if (Status sent = channel.send(ask.encode()); !sent)
        return emit("", true, "the training core " + (*core)->ended());
    if (hooks.generating)
        hooks.generating(true);
    std::string pending;
    std::string error;
    auto lastSent = std::chrono::steady_clock::now();
    while (true) {
        if (hooks.keepGoing && !hooks.keepGoing()) {
            (*core)->kill();
            break;
        }
        auto frame = channel.receive(200);
        if (!frame && frame.error().code == net::errc::kTimeout)
            continue;
        if (!frame) {
            error = "generation failed: the training core " + (*core)->ended() + " (" + frame.error().message + ")";
            break;
        }
        if (frame->type == corelink::type::kGenerated)
            break;
        if (frame->type == corelink::type::kError) {
            const Error failed = corelink::decodeError(*frame);
            error = failed.message;
            break;
        }
        auto piece = corelink::decodeText(*frame);
        if (!piece) {
            (*core)->kill();
            error = "generation failed: " + piece.error().message;
            break;
        }
        pending += *piece;
        const auto now = std::chrono::steady_clock::now();
        if (!pending.empty() && now - lastSent > std::chrono::milliseconds(50)) {
            emit(pending, false, "");
            pending.clear();
            lastSent = now;
        }
    }
    if (hooks.generating)
        hooks.generating(false);
    emit(pending, true, error);
}

} // namespace crowdtrain::daemon
