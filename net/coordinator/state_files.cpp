// The state folder's file formats (state_store.h): theta, the state file
// and the update file, written and read back verified.
#include "net/coordinator/state_store.h"
#include "net/wire/error_codes.h"

#include "net/transfer/sha256.h"

#include "core/file_io.h"
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
constexpr uint32_t kFormatVersion = 2; // of state files
constexpr uint32_t kUpdateFormatVersion = 1;
constexpr uint32_t kInlineParamsFormat = 1; // state files with theta inside (read only)
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

std::string headerBytes(
    const char (&magic)[8], uint32_t formatVersion, int64_t version, uint64_t parameters, uint64_t bytes)
{
    Header h{};
    std::memcpy(h.magic, magic, 8);
    h.formatVersion = formatVersion;
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
    const bool known = std::memcmp(magic, kUpdateMagic, 8) == 0
        ? h.formatVersion == kUpdateFormatVersion
        : h.formatVersion == kFormatVersion || h.formatVersion == kInlineParamsFormat;
    if (!known)
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
    if (h.formatVersion == kInlineParamsFormat)
        return kHeaderBytes + 3 * 4 * h.parameters + h.bytes + 32;
    return kHeaderBytes + 32 + 2 * 4 * h.parameters + h.bytes + 32;
}

uint64_t updateFileSize(const Header& h)
{
    return kHeaderBytes + 32 + h.bytes;
}

Status writeFloats(core::AtomicFile& out, net::Sha256& hash, std::span<const float> values, uint64_t count)
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
    // In slices, so that hashing and writing share the cache.
    constexpr std::size_t kSlice = 1 << 20;
    for (std::size_t at = 0; at < values.size(); at += kSlice) {
        const std::size_t n = std::min(kSlice, values.size() - at);
        hash.update(values.data() + at, n * 4);
        if (Status s = out.write(values.data() + at, n * 4); !s)
            return s;
    }
    return Status::success();
}

bool readInto(std::ifstream& in, net::Sha256& hash, void* data, std::size_t bytes)
{
    if (!in.read(static_cast<char*>(data), std::streamsize(bytes)))
        return false;
    hash.update(data, bytes);
    return true;
}

} // namespace

std::string thetaFileName(int64_t version)
{
    return "state-v" + std::to_string(version);
}

Result<WrittenState> writeGlobalState(const std::filesystem::path& file, const GlobalStateView& state)
{
    const uint64_t p = state.params.size();
    if ((!state.momentum.empty() && state.momentum.size() != p)
        || (!state.updateResidual.empty() && state.updateResidual.size() != p))
        return Error::make(net::errc::kBadState, "momentum and update residual must hold P elements (or none)");
    WrittenState written;
    auto theta = core::AtomicFile::create(file.parent_path() / thetaFileName(state.version));
    if (!theta)
        return theta.error();
    net::Sha256 thetaHash;
    if (Status s = writeFloats(*theta, thetaHash, state.params, p); !s)
        return s.error();
    if (Status s = theta->commit(); !s)
        return s.error();
    const net::Sha256Digest thetaDigest = thetaHash.finish();
    written.paramsSha256 = net::toHex(thetaDigest);

    auto out = core::AtomicFile::create(file);
    if (!out)
        return out.error();
    net::Sha256 hash;
    std::string header = headerBytes(kStateMagic, kFormatVersion, state.version, p, state.extra.size());
    header.append(reinterpret_cast<const char*>(thetaDigest.data()), thetaDigest.size());
    hash.update(header);
    if (Status s = out->write(header); !s)
        return s.error();
    for (std::span<const float> values : {state.momentum, state.updateResidual}) {
        if (Status s = writeFloats(*out, hash, values, p); !s)
            return s.error();
    }
    hash.update(state.extra);
    if (Status s = out->write(state.extra); !s)
        return s.error();
    const net::Sha256Digest digest = hash.finish();
    if (Status s = out->write(digest.data(), digest.size()); !s)
        return s.error();
    if (Status s = out->commit(); !s)
        return s.error();
    written.bytes = 4 * p + stateFileSize(Header{{}, kFormatVersion, 0, 0, p, state.extra.size()});
    return written;
}

Result<WrittenState> writeGlobalState(const std::filesystem::path& file, const GlobalState& state)
{
    return writeGlobalState(
        file, GlobalStateView{state.version, state.params, state.momentum, state.updateResidual, state.extra});
}

namespace {

// theta_v from its own file, checked against the hash the state file holds.
Status readTheta(const std::filesystem::path& stateFile, int64_t version, const net::Sha256Digest& expected,
    std::vector<float>& params)
{
    const std::filesystem::path file = stateFile.parent_path() / thetaFileName(version);
    std::ifstream in(file, std::ios::binary);
    if (!in)
        return corrupt(file, "missing (" + std::string(std::strerror(errno)) + ")");
    std::error_code ec;
    const uint64_t size = std::filesystem::file_size(file, ec);
    if (ec || size != params.size() * 4)
        return corrupt(file,
            "size is " + std::to_string(size) + " bytes, expected " + std::to_string(params.size() * 4)
                + " (truncated or damaged)");
    net::Sha256 hash;
    if (!readInto(in, hash, params.data(), params.size() * 4))
        return corrupt(file, "truncated");
    if (hash.finish() != expected)
        return corrupt(file, "checksum mismatch (the file is damaged)");
    return Status::success();
}

} // namespace

Result<GlobalState> readGlobalState(
    const std::filesystem::path& file, std::optional<uint64_t> expectedParameters, bool withParams)
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
    const bool inlineParams = header->formatVersion == kInlineParamsFormat;
    if (withParams || inlineParams)
        state.params.resize(p);
    state.momentum.resize(p);
    state.updateResidual.resize(p);
    state.extra.resize(std::size_t(header->bytes));
    net::Sha256Digest thetaDigest{};
    if (!inlineParams && !readInto(in, hash, thetaDigest.data(), thetaDigest.size()))
        return corrupt(file, "truncated");
    net::Sha256Digest stored{};
    if ((inlineParams && !readInto(in, hash, state.params.data(), p * 4))
        || !readInto(in, hash, state.momentum.data(), p * 4) || !readInto(in, hash, state.updateResidual.data(), p * 4)
        || !readInto(in, hash, state.extra.data(), state.extra.size())
        || !in.read(reinterpret_cast<char*>(stored.data()), stored.size()))
        return corrupt(file, "truncated");
    if (hash.finish() != stored)
        return corrupt(file, "checksum mismatch (the file is damaged)");
    if (inlineParams) {
        state.paramsSha256 = parametersSha256Hex(state.params);
        if (!withParams)
            state.params = std::vector<float>();
    } else if (!withParams) {
        state.paramsSha256 = net::toHex(thetaDigest);
    } else {
        if (Status s = readTheta(file, state.version, thetaDigest, state.params); !s)
            return s.error();
        state.paramsSha256 = net::toHex(thetaDigest);
    }
    return state;
}

Status writeUpdateFile(
    const std::filesystem::path& file, int64_t version, uint64_t parameters, std::string_view payload)
{
    const net::Sha256Digest digest = net::sha256Digest(payload);
    std::string bytes = headerBytes(kUpdateMagic, kUpdateFormatVersion, version, parameters, payload.size());
    bytes.append(reinterpret_cast<const char*>(digest.data()), digest.size());
    bytes.append(payload);
    return core::writeFileAtomic(file, bytes);
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

} // namespace crowdtrain::coordinator
