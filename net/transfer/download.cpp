#include "net/transfer/download.h"

#include "core/file_io.h"
#include "net/transfer/sha256.h"
#include "net/wire/error_codes.h"
#include "net/wire/limits.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

namespace crowdtrain::net {

namespace {

constexpr std::size_t kMaxProgressFileBytes = 4096;

using core::ioError;

// Errors a second fetch cannot cure.
bool isFinal(const Error& error)
{
    return isFinalForDownload(error.code);
}

} // namespace

Download::Download(ResourceSource& source, std::string resource, std::filesystem::path target, DownloadOptions options)
    : m_source(source)
    , m_resource(std::move(resource))
    , m_target(std::move(target))
    , m_options(std::move(options))
{ }

std::filesystem::path Download::partPath(const std::filesystem::path& target)
{
    return std::filesystem::path(target.string() + ".part");
}

std::filesystem::path Download::progressPath(const std::filesystem::path& target)
{
    return std::filesystem::path(target.string() + ".part.progress");
}

std::string Download::progressHeader() const
{
    const ResourceDescription& d = m_report.description;
    return "crowdtrain-download 1\nresource " + d.resource + "\nsha256 " + d.sha256 + "\nbytes "
        + std::to_string(d.bytes) + "\nchunk_bytes " + std::to_string(d.chunkBytes) + "\n";
}

void Download::discardPartial()
{
    ::unlink(partPath(m_target).c_str());
    ::unlink(progressPath(m_target).c_str());
}

Result<DownloadReport> Download::run()
{
    m_report = {};
    auto description = m_source.describe(m_resource);
    if (!description)
        return description.error();
    const ResourceDescription& d = *description;
    if (d.resource != m_resource || d.chunkBytes == 0 || d.chunkBytes > kMaxChunkBytes
        || d.chunkCount != chunkCountFor(d.bytes, d.chunkBytes) || d.chunkSha256.size() != d.chunkCount)
        return Error::make(errc::kMalformed, "the description of " + m_resource + " is inconsistent");
    m_report.description = d;

    std::error_code ec;
    if (std::filesystem::exists(m_target, ec)) {
        auto existing = sha256OfFile(m_target);
        if (existing && *existing == d.sha256) {
            discardPartial();
            m_report.alreadyComplete = true;
            return m_report;
        }
    }
    const std::filesystem::path part = partPath(m_target);
    const int fd = ::open(part.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return ioError("cannot open", part);
    Status status = Status::success();
    auto start = resumePoint(fd);
    if (!start)
        status = start.error();
    for (uint64_t i = start ? *start : 0; status && i < d.chunkCount; ++i) {
        if (m_options.cancel && m_options.cancel->load()) {
            status = Error::make(errc::kCancelled, "the download of " + m_resource + " was cancelled");
            break;
        }
        status = fetchChunk(fd, i);
        if (status && m_options.progress)
            m_options.progress(std::min(d.bytes, (i + 1) * d.chunkBytes), d.bytes);
    }
    if (status)
        status = finish(fd);
    ::close(fd);
    if (!status)
        return status.error();
    return m_report;
}

Result<uint64_t> Download::resumePoint(int fd)
{
    const ResourceDescription& d = m_report.description;
    uint64_t verified = 0;
    auto progress = core::readFile(progressPath(m_target), kMaxProgressFileBytes);
    const std::string header = progressHeader();
    if (progress && progress->compare(0, header.size(), header) == 0) {
        const std::string rest = progress->substr(header.size());
        if (rest.rfind("verified ", 0) == 0 && rest.size() > 10 && rest.back() == '\n') {
            try {
                verified = std::min<uint64_t>(std::stoull(rest.substr(9)), d.chunkCount);
            } catch (const std::exception&) {
                verified = 0;
            }
        }
    }
    // Trust the disk only as far as the chunk hashes say: a torn or damaged
    // .part is cut back to its last good chunk.
    uint64_t good = 0;
    while (good < verified) {
        // An unreadable chunk counts as a damaged one: it is fetched again.
        auto bytes = core::readAt(fd, good * d.chunkBytes, d.chunkLength(good), partPath(m_target));
        if (!bytes || bytes->size() != d.chunkLength(good) || sha256Hex(*bytes) != d.chunkSha256[good])
            break;
        ++good;
    }
    if (::ftruncate(fd, static_cast<off_t>(good * d.chunkBytes)) != 0)
        return ioError("cannot truncate", partPath(m_target));
    if (good != verified || good == 0)
        if (Status written
            = core::writeFileAtomic(progressPath(m_target), header + "verified " + std::to_string(good) + "\n");
            !written)
            return written.error();
    m_report.resumedChunks = good;
    return good;
}

Status Download::fetchChunk(int fd, uint64_t index)
{
    const ResourceDescription& d = m_report.description;
    const std::string name = "chunk " + std::to_string(index) + " of " + m_resource;
    Error last = Error::make(errc::kChecksumMismatch, name + " was not fetched");
    for (int attempt = 0; attempt < std::max(1, m_options.attemptsPerChunk); ++attempt) {
        auto data = m_source.fetch(m_resource, index);
        if (!data) {
            last = data.error();
            if (isFinal(last))
                return last;
            continue;
        }
        if (data->size() != d.chunkLength(index)) {
            last = Error::make(errc::kChecksumMismatch,
                name + " has " + std::to_string(data->size()) + " bytes, expected "
                    + std::to_string(d.chunkLength(index)));
            ++m_report.rejectedChunks;
            continue;
        }
        const std::string hash = sha256Hex(*data);
        if (hash != d.chunkSha256[index]) {
            last = Error::make(
                errc::kChecksumMismatch, name + " has SHA-256 " + hash + ", expected " + d.chunkSha256[index]);
            ++m_report.rejectedChunks;
            continue;
        }
        const std::filesystem::path part = partPath(m_target);
        if (Status written = core::writeAt(fd, index * d.chunkBytes, *data, part); !written)
            return written;
        if (::fdatasync(fd) != 0)
            return ioError("cannot sync", part);
        ++m_report.fetchedChunks;
        return core::writeFileAtomic(
            progressPath(m_target), progressHeader() + "verified " + std::to_string(index + 1) + "\n");
    }
    return last;
}

Status Download::finish(int fd)
{
    const ResourceDescription& d = m_report.description;
    const std::filesystem::path part = partPath(m_target);
    if (::ftruncate(fd, static_cast<off_t>(d.bytes)) != 0 || ::fsync(fd) != 0)
        return ioError("cannot finish", part);
    Sha256 whole;
    for (uint64_t i = 0; i < d.chunkCount; ++i) {
        auto bytes = core::readAt(fd, i * d.chunkBytes, d.chunkLength(i), part);
        if (!bytes)
            return bytes.error();
        whole.update(*bytes);
    }
    const std::string hash = whole.finishHex();
    if (hash != d.sha256) {
        // Every chunk matched its own hash, so the description itself is
        // wrong: start from nothing next time.
        discardPartial();
        return Error::make(errc::kChecksumMismatch,
            m_resource + " has SHA-256 " + hash + " as a whole, expected " + d.sha256 + "; nothing was saved");
    }
    if (::rename(part.c_str(), m_target.c_str()) != 0)
        return ioError("cannot rename into", m_target);
    ::unlink(progressPath(m_target).c_str());
    return core::syncFolder(m_target.parent_path());
}

} // namespace crowdtrain::net
