// Keeping theta_v current: the local copy from an earlier run, published
// updates (about P bytes each), or the full state (4P bytes) as a fallback.
#include "net/volunteer/agent_loop.h"

#include "engine/atomic_file.h"
#include "net/volunteer/theta_update.h"
#include "net/wire/error_codes.h"

namespace crowdtrain::volunteer {

Status AgentLoop::loadLocalState()
{
    m_localStateLoaded = true;
    auto theta = loadFloats(m_folder->thetaFile());
    if (!theta) {
        log("ignoring the local theta: %s", theta.error().message.c_str());
    } else if (*theta) {
        StoredFloats& stored = **theta;
        if (stored.manifestSha256 == m_join.manifestSha256 && stored.values.size() == m_elements) {
            log("found theta version %llu on disk", static_cast<unsigned long long>(stored.version));
            m_theta = Theta{stored.version, stored.sha256, std::move(stored.values)};
        }
    }
    auto residual = loadFloats(m_folder->residualFile());
    if (residual && *residual && (*residual)->manifestSha256 == m_join.manifestSha256
        && (*residual)->values.size() == m_elements)
        m_residual = std::move((*residual)->values);
    return Status::success();
}

Status AgentLoop::syncTheta()
{
    if (!m_localStateLoaded)
        if (Status loaded = loadLocalState(); !loaded)
            return loaded;
    if (m_theta && m_theta->version > m_serverVersion) {
        log("the coordinator is at version %llu, behind the local %llu; starting over from its state",
            static_cast<unsigned long long>(m_serverVersion), static_cast<unsigned long long>(m_theta->version));
        m_theta.reset();
    }
    while (m_theta && m_theta->version < m_serverVersion && !stopping()) {
        Status applied = applyOneUpdate();
        if (applied)
            continue;
        if (isConnectionError(applied.error()) || applied.error().code == net::errc::kNotJoined
            || applied.error().code == net::errc::kCancelled || applied.error().code == net::errc::kIoError)
            return applied;
        log("update from version %llu not usable (%s); downloading the full state",
            static_cast<unsigned long long>(m_theta->version), applied.error().message.c_str());
        break;
    }
    if (stopping())
        return Error::make(net::errc::kCancelled, "stopped while updating");
    if (!m_theta || m_theta->version != m_serverVersion)
        return downloadFullState();
    return Status::success();
}

Result<std::string> AgentLoop::downloadResource(const std::string& resource, const std::string& expectedSha256)
{
    m_folder->pruneDownloads(resource);
    const std::filesystem::path target = m_folder->downloadTarget(resource);
    ConnectionSource source(*m_connection, m_options.project, transferTimeoutMs());
    net::DownloadOptions options;
    options.attemptsPerChunk = 2;
    options.cancel = &m_agent.m_stop;
    auto report = net::Download(source, resource, target, options).run();
    if (!report)
        return report.error();
    if (report->description.sha256 != expectedSha256) {
        std::error_code ec;
        std::filesystem::remove(target, ec);
        return Error::make(net::errc::kChecksumMismatch, resource + " is not the resource announced (SHA-256 differs)");
    }
    auto bytes = engine::readWholeFile(target);
    std::error_code ec;
    std::filesystem::remove(target, ec);
    if (!bytes)
        return Error::make(net::errc::kIoError, bytes.error().message);
    if (report->resumedChunks > 0)
        log("%s: resumed after %llu verified chunks", resource.c_str(),
            static_cast<unsigned long long>(report->resumedChunks));
    return std::move(*bytes);
}

Status AgentLoop::applyOneUpdate()
{
    const uint64_t from = m_theta->version;
    auto reply
        = m_connection->call<net::GetUpdateReply>(net::GetUpdateRequest{m_options.project, from}, controlTimeoutMs());
    if (!reply)
        return reply.error();
    if (reply->fromVersion != from || reply->toVersion != from + 1 || reply->elements != m_elements)
        return Error::make(net::errc::kMalformed, "the update does not go from version " + std::to_string(from));
    auto codec = diloco::parseCodec(reply->codec);
    if (!codec)
        return codec.error();
    auto bytes = downloadResource(reply->resource, reply->sha256);
    if (!bytes)
        return bytes.error();
    auto next = applyPublishedUpdate(m_theta->values, *codec, *bytes, reply->stateSha256);
    if (!next)
        return Error::make(
            next.error().code, "update from version " + std::to_string(from) + ": " + next.error().message);
    const std::string sha = reply->stateSha256;
    if (Status saved = saveFloats(m_folder->thetaFile(), from + 1, m_join.manifestSha256, *next); !saved)
        return saved;
    m_theta = Theta{from + 1, sha, std::move(*next)};
    log("version %llu: applied the update (%zu bytes), SHA-256 verified", static_cast<unsigned long long>(from + 1),
        bytes->size());
    return Status::success();
}

Status AgentLoop::downloadFullState()
{
    // The state's name and hash come with a join reply; join again when the
    // one we hold is for an older version (re-joining keeps any task).
    if (m_join.version != m_serverVersion)
        if (Status joined = joinOnce(); !joined)
            return joined;
    const uint64_t version = m_join.version;
    log("downloading state %s (%llu bytes)", m_join.stateResource.c_str(),
        static_cast<unsigned long long>(m_join.stateBytes));
    auto bytes = downloadResource(m_join.stateResource, m_join.stateSha256);
    if (!bytes)
        return bytes.error();
    auto values = floatsFromBytes(*bytes, m_elements);
    if (!values)
        return values.error();
    const std::string sha = floatsSha256(*values);
    if (sha != m_join.stateSha256)
        return Error::make(
            net::errc::kChecksumMismatch, m_join.stateResource + " does not match the announced SHA-256");
    if (Status saved = saveFloats(m_folder->thetaFile(), version, m_join.manifestSha256, *values); !saved)
        return saved;
    m_theta = Theta{version, sha, std::move(*values)};
    m_serverVersion = std::max(m_serverVersion, version);
    log("version %llu: full state downloaded and verified", static_cast<unsigned long long>(version));
    return Status::success();
}

} // namespace crowdtrain::volunteer
