#include "net/volunteer/theta_sync.h"

#include "core/file_io.h"
#include "net/core_link/core_messages.h"
#include "net/volunteer/theta_update.h"
#include "net/wire/error_codes.h"

namespace crowdtrain::volunteer {

ThetaSync::ThetaSync(Session& session, const ProjectFolder& folder, Reporter& reporter, const std::atomic<bool>& stop,
    StateSwarm* stateSwarm, CoreHost* core)
    : m_session(session)
    , m_folder(folder)
    , m_reporter(reporter)
    , m_stop(stop)
    , m_stateSwarm(stateSwarm)
    , m_core(core)
{ }

void ThetaSync::loadLocalState()
{
    m_localStateLoaded = true;
    auto theta = loadFloats(m_folder.thetaFile());
    if (!theta) {
        m_reporter.log("ignoring the local theta: %s", theta.error().message.c_str());
        return;
    }
    if (!*theta)
        return;
    StoredFloats& stored = **theta;
    if (stored.manifestSha256 == m_session.joinReply().manifestSha256 && stored.values.size() == m_elements) {
        m_reporter.log("found theta version %llu on disk", static_cast<unsigned long long>(stored.version));
        m_savedSha256 = stored.sha256;
        m_theta = std::make_shared<Theta>(Theta{stored.version, stored.sha256, std::move(stored.values), {}});
    }
}

void ThetaSync::buildFromSeed()
{
    const std::optional<net::SeedInit>& init = m_session.joinReply().init;
    if (!init || !m_model || m_seedTried || !m_core)
        return;
    m_seedTried = true; // once per model: a mismatch stays one
    Result<std::vector<float>> values = Error::make(net::errc::kCancelled, "not built");
    if (Status built = m_session.whileAlive(
            [&] {
                values = seededTheta(*init);
                return Status::success();
            },
            0);
        !built)
        return;
    if (!values) {
        m_reporter.log("version 0 could not be built from the project's seed (%s); downloading instead",
            values.error().message.c_str());
        return;
    }
    std::string sha = floatsSha256(*values);
    if (sha != init->sha256) {
        // Another libtorch may draw other numbers from the same seed.
        m_reporter.log("version 0 built from the project's seed differs from the coordinator's; downloading instead");
        return;
    }
    m_reporter.log(
        "version 0 built from the project's seed %llu, SHA-256 verified", static_cast<unsigned long long>(init->seed));
    m_theta = std::make_shared<Theta>(Theta{0, std::move(sha), std::move(*values), {}});
}

// The core builds the model from the seed and writes its flat weights.
Result<std::vector<float>> ThetaSync::seededTheta(const net::SeedInit& init)
{
    const std::filesystem::path file = m_folder.dir() / "core" / "seeded.f32";
    std::error_code ec;
    std::filesystem::create_directories(file.parent_path(), ec);
    corelink::InitRequest request;
    request.model = corelink::modelConfigOf(*m_model);
    request.seed = init.seed;
    request.outFile = file.string();
    auto lease = m_core->lease();
    if (!lease)
        return lease.error();
    corelink::CoreChannel& channel = lease->core().channel();
    if (Status sent = channel.send(request.encode()); !sent)
        return Error::make(net::errc::kCoreFailed, "the training core " + lease->discard(false));
    auto reply = channel.receive(600000);
    if (!reply)
        return Error::make(
            net::errc::kCoreFailed, "the training core " + lease->discard(reply.error().code == net::errc::kTimeout));
    if (reply->type == corelink::type::kError)
        return corelink::decodeError(*reply);
    if (reply->type != corelink::type::kInitialized)
        return Error::make(net::errc::kCoreFailed, "the training core answered init with '" + reply->type + "'");
    auto values = readFloatFile(file, m_elements);
    std::filesystem::remove(file, ec);
    return values;
}

Result<std::shared_ptr<const Theta>> ThetaSync::spill()
{
    if (!m_theta || m_theta->values.empty())
        return std::shared_ptr<const Theta>(m_theta);
    if (m_savedSha256 != m_theta->sha256) { // theta_0 built from the seed: a second at GPT-2 size
        const std::string manifest = m_session.joinReply().manifestSha256;
        if (Status saved = m_session.whileAlive(
                [&] { return saveFloats(m_folder.thetaFile(), m_theta->version, manifest, m_theta->values); },
                m_theta->version);
            !saved)
            return saved.error();
        m_savedSha256 = m_theta->sha256;
    }
    m_theta = std::make_shared<Theta>(Theta{m_theta->version, m_theta->sha256, {}, m_folder.thetaFile()});
    return std::shared_ptr<const Theta>(m_theta);
}

// A spilled theta back into RAM, checked against what it was; anything else
// on disk (a damaged file) drops it, and the full state is downloaded.
void ThetaSync::reloadSpilled()
{
    if (!m_theta || !m_theta->values.empty())
        return;
    // A second or two at GPT-2 size (read, hashed): heartbeats go on.
    Result<std::optional<StoredFloats>> stored = std::optional<StoredFloats>();
    (void)m_session.whileAlive(
        [&] {
            stored = loadFloats(m_theta->file);
            return Status::success();
        },
        m_theta->version);
    if (stored && *stored && (*stored)->version == m_theta->version && (*stored)->sha256 == m_theta->sha256
        && (*stored)->values.size() == m_elements) {
        m_theta = std::make_shared<Theta>(Theta{m_theta->version, m_theta->sha256, std::move((*stored)->values), {}});
        return;
    }
    m_reporter.log("theta version %llu is no longer on disk as it was; downloading the full state",
        static_cast<unsigned long long>(m_theta->version));
    m_theta.reset();
    m_savedSha256.clear();
}

Status ThetaSync::sync()
{
    if (!m_localStateLoaded)
        loadLocalState();
    reloadSpilled();
    // Nothing on disk: theta_0 from the seed, then the kept updates (when
    // the coordinator no longer keeps them, the state is downloaded).
    if (!m_theta)
        buildFromSeed();
    const uint64_t serverVersion = m_session.serverVersion();
    if (m_theta && m_theta->version > serverVersion) {
        m_reporter.log("the coordinator is at version %llu, behind the local %llu; starting over from its state",
            static_cast<unsigned long long>(serverVersion), static_cast<unsigned long long>(m_theta->version));
        m_theta.reset();
    }
    while (m_theta && m_theta->version < m_session.serverVersion() && !m_stop.load()) {
        const uint64_t from = m_theta->version;
        Status applied = applyOneUpdate();
        if (applied)
            continue;
        const std::string& code = applied.error().code;
        if (isConnectionError(applied.error()) || code == net::errc::kNotJoined || code == net::errc::kCancelled
            || code == net::errc::kIoError)
            return applied;
        m_reporter.log("update from version %llu not usable (%s); downloading the full state",
            static_cast<unsigned long long>(from), applied.error().message.c_str());
        break;
    }
    if (m_stop.load())
        return Error::make(net::errc::kCancelled, "stopped while updating");
    if (!m_theta || m_theta->version != m_session.serverVersion())
        if (Status downloaded = downloadFullState(); !downloaded)
            return downloaded;
    if (m_stateSwarm)
        m_stateSwarm->holding(m_theta->version);
    return Status::success();
}

void ThetaSync::followSeeding()
{
    if (m_stateSwarm && m_theta)
        m_stateSwarm->holding(m_theta->version);
}

Result<std::string> ThetaSync::downloadResource(const std::string& resource, const std::string& expectedSha256)
{
    auto target = downloadToFile(resource, expectedSha256);
    if (!target)
        return target.error();
    auto bytes = core::readFile(*target);
    std::error_code ec;
    std::filesystem::remove(*target, ec);
    if (!bytes)
        return Error::make(net::errc::kIoError, bytes.error().message);
    return std::move(*bytes);
}

Result<std::filesystem::path> ThetaSync::downloadToFile(const std::string& resource, const std::string& expectedSha256)
{
    auto source = m_session.resources();
    if (!source)
        return Error::make(net::errc::kTimeout, "not connected");
    m_folder.pruneDownloads(resource);
    const std::filesystem::path target = m_folder.downloadTarget(resource);
    net::DownloadOptions options;
    options.attemptsPerChunk = 2;
    options.cancel = &m_stop;
    auto report = net::Download(*source, resource, target, options).run();
    if (!report)
        return report.error();
    std::error_code ec;
    if (report->description.sha256 != expectedSha256) {
        std::filesystem::remove(target, ec);
        return Error::make(net::errc::kChecksumMismatch, resource + " is not the resource announced (SHA-256 differs)");
    }
    if (report->resumedChunks > 0)
        m_reporter.log("%s: resumed after %llu verified chunks", resource.c_str(),
            static_cast<unsigned long long>(report->resumedChunks));
    return target;
}

Status ThetaSync::applyOneUpdate()
{
    const uint64_t from = m_theta->version;
    auto reply = m_session.call<net::GetUpdateReply>(
        net::GetUpdateRequest{m_session.project(), from}, m_session.controlTimeoutMs());
    if (!reply)
        return reply.error();
    if (reply->fromVersion != from || reply->toVersion != from + 1 || reply->elements != m_elements)
        return Error::make(net::errc::kMalformed, "the update does not go from version " + std::to_string(from));
    auto codec = diloco::parseCodec(reply->codec);
    if (!codec)
        return codec.error();
    std::optional<diloco::SparseLayout> sparse;
    if (*codec == diloco::Codec::Sparse) {
        auto layout = sparseLayoutOf(m_session.joinReply());
        if (!layout)
            return layout.error();
        sparse = std::move(*layout);
    }
    auto bytes = downloadResource(reply->resource, reply->sha256);
    if (!bytes)
        return bytes.error();
    // Seconds at GPT-2 size (decode, hash, theta saved): heartbeats go on.
    const std::string manifest = m_session.joinReply().manifestSha256;
    // Held by no one else (no task trains from it), theta_v becomes theta_{v+1}
    // where it lies: no second copy of the weights. A failure then leaves it
    // neither, so it is dropped and the full state downloaded.
    const bool inPlace = m_theta.use_count() == 1;
    std::shared_ptr<Theta> next = inPlace ? m_theta : std::make_shared<Theta>(*m_theta);
    if (Status applied = m_session.whileAlive(
            [&]() -> Status {
                Status updated = applyPublishedUpdateInPlace(
                    next->values, *codec, *bytes, reply->stateSha256, sparse ? &*sparse : nullptr);
                if (!updated)
                    return Error::make(updated.error().code,
                        "update from version " + std::to_string(from) + ": " + updated.error().message);
                m_savedSha256.clear();
                if (Status saved = saveFloats(m_folder.thetaFile(), from + 1, manifest, next->values); !saved)
                    return saved;
                m_savedSha256 = reply->stateSha256;
                return Status::success();
            },
            from);
        !applied) {
        // The codec's errors leave the weights untouched; a mismatch or a
        // failed save leaves them changed.
        const std::string& code = applied.error().code;
        if (inPlace && (code == net::errc::kChecksumMismatch || code == net::errc::kIoError))
            m_theta.reset();
        return applied;
    }
    next->version = from + 1;
    next->sha256 = reply->stateSha256;
    m_theta = std::move(next);
    m_reporter.log("version %llu: applied the update (%zu bytes), SHA-256 verified",
        static_cast<unsigned long long>(from + 1), bytes->size());
    return Status::success();
}

Status ThetaSync::downloadFullState()
{
    // The state's name and hash come with a join reply; join again when the
    // one we hold is for an older version (re-joining keeps any task).
    if (m_session.joinReply().version != m_session.serverVersion())
        if (Status joined = m_session.join(); !joined)
            return joined;
    const net::JoinReply& join = m_session.joinReply();
    const uint64_t version = join.version;
    m_reporter.log("downloading state %s (%llu bytes)", join.stateResource.c_str(),
        static_cast<unsigned long long>(join.stateBytes));
    std::optional<std::string> swarmed
        = m_stateSwarm ? m_stateSwarm->download(join, this->version(), m_stop) : std::nullopt;
    // Chunks land in a file, read straight into the weights; the swarm's
    // bytes are let go as soon as they are copied.
    auto file = swarmed ? Result<std::filesystem::path>(std::filesystem::path())
                        : downloadToFile(join.stateResource, join.stateSha256);
    if (!file)
        return file.error();
    // Seconds at GPT-2 size (hash, theta saved): heartbeats go on. The join
    // reply is copied: a re-join meanwhile would replace the session's.
    Result<std::vector<float>> values = Error::make(net::errc::kCancelled, "not read");
    std::string sha;
    if (Status checked = m_session.whileAlive(
            [&, join]() -> Status {
                if (swarmed) {
                    values = floatsFromBytes(*swarmed, m_elements);
                    swarmed.reset();
                } else {
                    values = readFloatFile(*file, m_elements);
                    std::error_code ec;
                    std::filesystem::remove(*file, ec);
                }
                if (!values)
                    return values.error();
                sha = floatsSha256(*values);
                if (sha != join.stateSha256)
                    return Error::make(
                        net::errc::kChecksumMismatch, join.stateResource + " does not match the announced SHA-256");
                m_savedSha256.clear();
                if (Status saved = saveFloats(m_folder.thetaFile(), version, join.manifestSha256, *values); !saved)
                    return saved;
                m_savedSha256 = sha;
                return Status::success();
            },
            this->version());
        !checked)
        return checked;
    m_theta = std::make_shared<Theta>(Theta{version, sha, std::move(*values), {}});
    m_session.noteServerVersion(std::max(m_session.serverVersion(), version));
    m_reporter.log("version %llu: full state downloaded and verified", static_cast<unsigned long long>(version));
    return Status::success();
}

} // namespace crowdtrain::volunteer
