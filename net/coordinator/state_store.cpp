#include "net/coordinator/state_store.h"
#include "net/wire/error_codes.h"

#include "net/transfer/sha256.h"

#include "engine/atomic_file.h"
#include "engine/gpt_config.h"

#include <bit>
#include <cstring>
#include <fstream>
#include <set>

namespace crowdtrain::coordinator {
namespace {

static_assert(std::endian::native == std::endian::little, "state files are written as little-endian floats");

constexpr char kStateMagic[8] = {'C', 'T', 'G', 'L', 'O', 'B', 'A', 'L'};
constexpr char kUpdateMagic[8] = {'C', 'T', 'U', 'P', 'D', 'A', 'T', 'E'};
constexpr uint32_t kFormatVersion = 1;
constexpr std::size_t kHeaderBytes = 8 + 4 + 4 + 8 + 8 + 8;

struct Header {
    char magic[8];
    uint32_t formatVersion;
    uint32_t reserved;
    int64_t version;
    uint64_t parameters;
    uint64_t bytes; // extra bytes (state) or payload bytes (update)
};
static_assert(sizeof(Header) == kHeaderBytes);

std::string headerBytes(const char (&magic)[8], int64_t version, uint64_t parameters, uint64_t bytes)
{
    Header h{};
    std::memcpy(h.magic, magic, 8);
    h.formatVersion = kFormatVersion;
    h.version = version;
    h.parameters = parameters;
    h.bytes = bytes;
    return std::string(reinterpret_cast<const char*>(&h), sizeof h);
}

Error corrupt(const std::filesystem::path& file, const std::string& why)
{
    return Error::make(net::errc::kStateCorrupt, file.string() + ": " + why);
}

// Reads a header and checks magic, format and the total file size.
Result<Header> readHeader(std::ifstream& in, const std::filesystem::path& file, const char (&magic)[8],
    std::optional<uint64_t> expectedParameters, uint64_t (*expectedSize)(const Header&))
{
    std::error_code ec;
    const uint64_t size = std::filesystem::file_size(file, ec);
    if (ec)
        return Error::make(net::errc::kIoError, "cannot read " + file.string() + ": " + ec.message());
    Header h{};
    if (size < kHeaderBytes || !in.read(reinterpret_cast<char*>(&h), sizeof h))
        return corrupt(file, "truncated header");
    if (std::memcmp(h.magic, magic, 8) != 0)
        return corrupt(file, "not a " + std::string(magic, 8) + " file");
    if (h.formatVersion != kFormatVersion)
        return corrupt(file, "unknown format version " + std::to_string(h.formatVersion));
    if (expectedParameters && h.parameters != *expectedParameters)
        return Error::make(net::errc::kStateMismatch,
            file.string() + " holds " + std::to_string(h.parameters) + " parameters, the model has "
                + std::to_string(*expectedParameters));
    // Guard the size arithmetic against absurd headers before trusting it.
    if (h.parameters > (uint64_t(1) << 40) || h.bytes > (uint64_t(1) << 40))
        return corrupt(file, "implausible sizes in the header");
    if (size != expectedSize(h))
        return corrupt(file,
            "size is " + std::to_string(size) + " bytes, expected " + std::to_string(expectedSize(h))
                + " (truncated or damaged)");
    return h;
}

uint64_t stateFileSize(const Header& h)
{
    return kHeaderBytes + 3 * 4 * h.parameters + h.bytes + 32;
}

uint64_t updateFileSize(const Header& h)
{
    return kHeaderBytes + 32 + h.bytes;
}

Status writeFloats(engine::AtomicFile& out, net::Sha256& hash, const std::vector<float>& values, uint64_t count)
{
    if (values.empty()) {
        const std::vector<float> zeros(std::min<uint64_t>(count, 1 << 20), 0.0f);
        for (uint64_t done = 0; done < count;) {
            const uint64_t n = std::min<uint64_t>(count - done, zeros.size());
            hash.update(zeros.data(), n * 4);
            if (Status s = out.write(zeros.data(), n * 4); !s)
                return s;
            done += n;
        }
        return Status::success();
    }
    hash.update(values.data(), values.size() * 4);
    return out.write(values.data(), values.size() * 4);
}

bool readInto(std::ifstream& in, net::Sha256& hash, void* data, std::size_t bytes)
{
    if (!in.read(static_cast<char*>(data), std::streamsize(bytes)))
        return false;
    hash.update(data, bytes);
    return true;
}

} // namespace

Status writeGlobalState(const std::filesystem::path& file, const GlobalState& state)
{
    const uint64_t p = state.params.size();
    if ((!state.momentum.empty() && state.momentum.size() != p)
        || (!state.updateResidual.empty() && state.updateResidual.size() != p))
        return Error::make(net::errc::kBadState, "momentum and update residual must hold P elements (or none)");
    auto out = engine::AtomicFile::create(file);
    if (!out)
        return out.error();
    net::Sha256 hash;
    const std::string header = headerBytes(kStateMagic, state.version, p, state.extra.size());
    hash.update(header);
    if (Status s = out->write(header); !s)
        return s;
    for (const std::vector<float>* values : {&state.params, &state.momentum, &state.updateResidual}) {
        if (Status s = writeFloats(*out, hash, *values, p); !s)
            return s;
    }
    hash.update(state.extra);
    if (Status s = out->write(state.extra); !s)
        return s;
    const net::Sha256Digest digest = hash.finish();
    if (Status s = out->write(digest.data(), digest.size()); !s)
        return s;
    return out->commit();
}

Result<GlobalState> readGlobalState(const std::filesystem::path& file, std::optional<uint64_t> expectedParameters)
{
    std::ifstream in(file, std::ios::binary);
    if (!in)
        return Error::make(net::errc::kIoError, "cannot open " + file.string() + ": " + std::strerror(errno));
    auto header = readHeader(in, file, kStateMagic, expectedParameters, stateFileSize);
    if (!header)
        return header.error();
    net::Sha256 hash;
    hash.update(&*header, sizeof(Header));
    GlobalState state;
    state.version = header->version;
    const std::size_t p = std::size_t(header->parameters);
    state.params.resize(p);
    state.momentum.resize(p);
    state.updateResidual.resize(p);
    state.extra.resize(std::size_t(header->bytes));
    net::Sha256Digest stored{};
    if (!readInto(in, hash, state.params.data(), p * 4) || !readInto(in, hash, state.momentum.data(), p * 4)
        || !readInto(in, hash, state.updateResidual.data(), p * 4)
        || !readInto(in, hash, state.extra.data(), state.extra.size())
        || !in.read(reinterpret_cast<char*>(stored.data()), stored.size()))
        return corrupt(file, "truncated");
    if (hash.finish() != stored)
        return corrupt(file, "checksum mismatch (the file is damaged)");
    return state;
}

Status writeUpdateFile(
    const std::filesystem::path& file, int64_t version, uint64_t parameters, std::string_view payload)
{
    const net::Sha256Digest digest = net::sha256Digest(payload);
    std::string bytes = headerBytes(kUpdateMagic, version, parameters, payload.size());
    bytes.append(reinterpret_cast<const char*>(digest.data()), digest.size());
    bytes.append(payload);
    return engine::writeFileAtomically(file, bytes);
}

Result<std::string> readUpdateFile(
    const std::filesystem::path& file, int64_t expectedVersion, uint64_t expectedParameters)
{
    std::ifstream in(file, std::ios::binary);
    if (!in)
        return Error::make(net::errc::kIoError, "cannot open " + file.string() + ": " + std::strerror(errno));
    auto header = readHeader(in, file, kUpdateMagic, expectedParameters, updateFileSize);
    if (!header)
        return header.error();
    if (header->version != expectedVersion)
        return corrupt(file, "holds the update to version " + std::to_string(header->version));
    net::Sha256Digest stored{};
    std::string payload(std::size_t(header->bytes), '\0');
    if (!in.read(reinterpret_cast<char*>(stored.data()), stored.size())
        || !in.read(payload.data(), std::streamsize(payload.size())))
        return corrupt(file, "truncated");
    if (net::sha256Digest(payload) != stored)
        return corrupt(file, "checksum mismatch (the file is damaged)");
    return payload;
}

std::string parametersSha256Hex(std::span<const float> params)
{
    net::Sha256 hash;
    hash.update(params.data(), params.size_bytes());
    return net::toHex(hash.finish());
}

std::string ProjectStore::stateFileName(int64_t version)
{
    return "state/global-" + std::to_string(version) + ".bin";
}

std::string ProjectStore::updateFileName(int64_t version)
{
    return "state/update-" + std::to_string(version) + ".bin";
}

ProjectStore::ProjectStore(std::filesystem::path dir, Ledger ledger, uint64_t parameters, uint64_t tokensPerPiece,
    uint32_t piecesPerTask, uint64_t dataSeed, int64_t leaseMs)
    : m_dir(std::move(dir))
    , m_ledger(std::move(ledger))
    , m_parameters(parameters)
    , m_tokensPerPiece(tokensPerPiece)
    , m_piecesPerTask(piecesPerTask)
    , m_dataSeed(dataSeed)
    , m_leaseMs(leaseMs)
{ }

Result<ProjectStore> ProjectStore::open(const ProjectSpec& spec, const std::filesystem::path& stateDir)
{
    std::error_code ec;
    std::filesystem::create_directories(stateDir / "state", ec);
    if (ec)
        return Error::make(net::errc::kIoError, "cannot create " + (stateDir / "state").string() + ": " + ec.message());
    auto ledger = Ledger::open(stateDir / "ledger.sqlite");
    if (!ledger)
        return ledger.error();
    const uint64_t parameters = uint64_t(engine::parameterCount(spec.model));
    // A state folder belongs to one project and one model shape.
    const std::pair<std::string, std::string> identity[]
        = {{"project_name", spec.name}, {"parameter_count", std::to_string(parameters)}};
    for (const auto& [key, value] : identity) {
        auto stored = ledger->meta(key);
        if (!stored)
            return stored.error();
        if (*stored && **stored != value)
            return Error::make(net::errc::kStateMismatch,
                stateDir.string() + " belongs to " + key + " " + **stored + ", not " + value
                    + " (use another state folder for another project or model)");
        if (!*stored) {
            if (Status s = ledger->setMeta(key, value); !s)
                return s.error();
        }
    }
    auto last = ledger->lastRound();
    if (!last)
        return last.error();
    ProjectStore store(stateDir, std::move(*ledger), parameters, spec.tokensPerPiece(), spec.piecesPerTask(),
        spec.init.seed, spec.round.deadlineSeconds * 1000);
    store.m_lastRound = *last;
    if (Status s = store.removeUnreferencedFiles(&store.m_removedAtOpen); !s)
        return s.error();
    return store;
}

Status ProjectStore::removeUnreferencedFiles(std::vector<std::filesystem::path>* removed)
{
    auto kept = m_ledger.lastRounds(2);
    if (!kept)
        return kept.error();
    std::set<std::filesystem::path> keep;
    for (const RoundRecord& r : *kept)
        keep.insert(m_dir / r.stateFile);
    if (!kept->empty() && !kept->front().updateFile.empty())
        keep.insert(m_dir / kept->front().updateFile);
    std::error_code ec;
    bool any = false;
    for (const auto& entry : std::filesystem::directory_iterator(m_dir / "state", ec)) {
        const std::string name = entry.path().filename().string();
        const bool ours = name.ends_with(".bin") && (name.starts_with("global-") || name.starts_with("update-"));
        const bool temporary = name.starts_with(".") && name.find(".tmp-") != std::string::npos;
        if ((ours && !keep.contains(entry.path())) || temporary) {
            std::filesystem::remove(entry.path(), ec);
            if (ec)
                return Error::make(net::errc::kIoError, "cannot remove " + entry.path().string() + ": " + ec.message());
            if (removed)
                removed->push_back(entry.path());
            any = true;
        }
    }
    if (ec)
        return Error::make(net::errc::kIoError, "cannot list " + (m_dir / "state").string() + ": " + ec.message());
    return any ? engine::syncDirectory(m_dir / "state") : Status::success();
}

Result<GlobalState> ProjectStore::loadLatest()
{
    if (!m_lastRound)
        return Error::make(net::errc::kNoState, m_dir.string() + " holds no committed round yet");
    auto state = readGlobalState(m_dir / m_lastRound->stateFile, m_parameters);
    if (!state)
        return state.error();
    if (state->version != m_lastRound->version)
        return Error::make(net::errc::kStateCorrupt,
            (m_dir / m_lastRound->stateFile).string() + " holds version " + std::to_string(state->version)
                + ", the ledger says " + std::to_string(m_lastRound->version));
    return state;
}

Status ProjectStore::commit(const GlobalState& state, RoundCommit commit, std::string_view encodedUpdate)
{
    const int64_t nextRound = m_lastRound ? m_lastRound->round + 1 : 0;
    const int64_t nextVersion = m_lastRound ? m_lastRound->version + 1 : 0;
    if (commit.record.round != nextRound)
        return Error::make(net::errc::kBadCommit,
            "round " + std::to_string(commit.record.round) + " is not the next round " + std::to_string(nextRound));
    if (state.version != nextVersion)
        return Error::make(net::errc::kBadCommit,
            "state version " + std::to_string(state.version) + " is not the next version "
                + std::to_string(nextVersion));
    if (state.params.size() != m_parameters)
        return Error::make(net::errc::kBadCommit,
            "the state holds " + std::to_string(state.params.size()) + " parameters, the model has "
                + std::to_string(m_parameters));
    if (nextVersion == 0 && !encodedUpdate.empty())
        return Error::make(net::errc::kBadCommit, "version 0 has no update");

    const std::string stateName = stateFileName(state.version);
    const std::string updateName = encodedUpdate.empty() ? std::string() : updateFileName(state.version);
    if (Status s = writeGlobalState(m_dir / stateName, state); !s)
        return s;
    if (!updateName.empty()) {
        if (Status s = writeUpdateFile(m_dir / updateName, state.version, m_parameters, encodedUpdate); !s)
            return s;
    }
    commit.record.version = state.version;
    commit.record.stateFile = stateName;
    commit.record.updateFile = updateName;
    for (ContributionRecord& c : commit.contributions)
        c.round = commit.record.round;
    if (Status s = m_ledger.commitRound(commit); !s) {
        // Not named by the ledger: orphans now, removed right away.
        std::error_code ec;
        std::filesystem::remove(m_dir / stateName, ec);
        if (!updateName.empty())
            std::filesystem::remove(m_dir / updateName, ec);
        return s;
    }
    auto last = m_ledger.lastRound();
    if (!last)
        return last.error();
    m_lastRound = *last;
    // The round is durable; failing to prune old files only costs disk.
    (void)removeUnreferencedFiles(nullptr);
    return Status::success();
}

Result<std::string> ProjectStore::readUpdate(int64_t version)
{
    if (!m_lastRound || version != m_lastRound->version || m_lastRound->updateFile.empty())
        return Error::make(net::errc::kNoUpdate, "the update to version " + std::to_string(version) + " is not kept");
    return readUpdateFile(m_dir / m_lastRound->updateFile, version, m_parameters);
}

Result<DataPlan> ProjectStore::restoreDataPlan(const engine::DataSet& data)
{
    auto plan = DataPlan::create(data, m_tokensPerPiece, m_dataSeed, m_leaseMs, m_piecesPerTask);
    if (!plan)
        return plan.error();
    auto progress = m_ledger.dataProgress();
    if (!progress)
        return progress.error();
    if (*progress) {
        if (Status s = plan->restore((*progress)->blob); !s)
            return Error::make(s.error().code, m_ledger.file().string() + ": " + s.error().message);
    }
    return plan;
}

} // namespace crowdtrain::coordinator
