#include "net/transfer/resource_table.h"

#include "core/file_io.h"
#include "core/utf8.h"
#include "net/transfer/sha256.h"
#include "net/wire/error_codes.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

namespace crowdtrain::net {

namespace {

using core::ioError;

// Reads exactly `size` bytes at `offset`.
Result<std::string> readExactly(int fd, uint64_t offset, uint64_t size, const std::filesystem::path& file)
{
    auto bytes = core::readAt(fd, offset, size, file);
    if (bytes && bytes->size() < size)
        return Error::make(errc::kIoError, file.string() + " is shorter than when it was published");
    return bytes;
}

Status checkShape(const std::string& name, uint64_t bytes, uint64_t chunkBytes)
{
    if (name.empty() || name.size() > kMaxResourceNameChars || !core::isValidUtf8(name))
        return Error::make(errc::kInvalidArgument, "resource name \"" + name + "\" is empty, too long or not UTF-8");
    if (chunkBytes == 0 || chunkBytes > kMaxChunkBytes)
        return Error::make(errc::kInvalidArgument, "chunk size " + std::to_string(chunkBytes) + " is out of range");
    if (chunkCountFor(bytes, chunkBytes) > kMaxChunkCount)
        return Error::make(errc::kTooLarge,
            "resource " + name + " of " + std::to_string(bytes) + " bytes needs more than "
                + std::to_string(kMaxChunkCount) + " chunks");
    return Status::success();
}

} // namespace

Status ResourceTable::addFile(const std::string& name, const std::filesystem::path& file, uint64_t chunkBytes)
{
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ioError("cannot open", file);
    const off_t size = ::lseek(fd, 0, SEEK_END);
    if (size < 0) {
        Error error = ioError("cannot seek in", file);
        ::close(fd);
        return error;
    }
    if (Status shape = checkShape(name, static_cast<uint64_t>(size), chunkBytes); !shape) {
        ::close(fd);
        return shape;
    }
    auto entry = std::make_shared<Entry>();
    entry->file = file;
    ResourceDescription& d = entry->description;
    d.resource = name;
    d.bytes = static_cast<uint64_t>(size);
    d.chunkBytes = chunkBytes;
    d.chunkCount = chunkCountFor(d.bytes, chunkBytes);
    Sha256 whole;
    for (uint64_t i = 0; i < d.chunkCount; ++i) {
        auto bytes = readExactly(fd, i * chunkBytes, d.chunkLength(i), file);
        if (!bytes) {
            ::close(fd);
            return bytes.error();
        }
        whole.update(*bytes);
        d.chunkSha256.push_back(sha256Hex(*bytes));
    }
    ::close(fd);
    d.sha256 = whole.finishHex();
    return add(name, std::move(entry));
}

Status ResourceTable::addBlob(const std::string& name, std::string bytes, uint64_t chunkBytes)
{
    if (Status shape = checkShape(name, bytes.size(), chunkBytes); !shape)
        return shape;
    auto entry = std::make_shared<Entry>();
    ResourceDescription& d = entry->description;
    d.resource = name;
    d.bytes = bytes.size();
    d.chunkBytes = chunkBytes;
    d.chunkCount = chunkCountFor(d.bytes, chunkBytes);
    for (uint64_t i = 0; i < d.chunkCount; ++i)
        d.chunkSha256.push_back(sha256Hex(std::string_view(bytes).substr(i * chunkBytes, d.chunkLength(i))));
    d.sha256 = sha256Hex(bytes);
    entry->blob = std::move(bytes);
    return add(name, std::move(entry));
}

Status ResourceTable::add(const std::string& name, std::shared_ptr<Entry> entry)
{
    std::lock_guard lock(m_mutex);
    if (m_entries.count(name))
        return Error::make(errc::kExists, "resource " + name + " is already published");
    m_entries.emplace(name, std::move(entry));
    return Status::success();
}

void ResourceTable::remove(const std::string& name)
{
    std::lock_guard lock(m_mutex);
    m_entries.erase(name);
}

bool ResourceTable::contains(const std::string& name) const
{
    return find(name) != nullptr;
}

std::shared_ptr<const ResourceTable::Entry> ResourceTable::find(const std::string& name) const
{
    std::lock_guard lock(m_mutex);
    auto it = m_entries.find(name);
    return it == m_entries.end() ? nullptr : it->second;
}

Result<ResourceDescription> ResourceTable::describe(const std::string& name) const
{
    auto entry = find(name);
    if (!entry)
        return Error::make(errc::kNotFound, "no resource named \"" + name + "\"");
    return entry->description;
}

Result<Chunk> ResourceTable::chunk(const std::string& name, uint64_t index) const
{
    // The entry is immutable and shared: reading happens outside the lock.
    auto entry = find(name);
    if (!entry)
        return Error::make(errc::kNotFound, "no resource named \"" + name + "\"");
    const ResourceDescription& d = entry->description;
    if (index >= d.chunkCount)
        return Error::make(errc::kBadIndex,
            "resource " + name + " has " + std::to_string(d.chunkCount) + " chunks, not " + std::to_string(index + 1));
    if (!entry->file)
        return Chunk{index, entry->blob.substr(index * d.chunkBytes, d.chunkLength(index))};
    const int fd = ::open(entry->file->c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ioError("cannot open", *entry->file);
    auto bytes = readExactly(fd, index * d.chunkBytes, d.chunkLength(index), *entry->file);
    ::close(fd);
    if (!bytes)
        return bytes.error();
    // A file changed after publication must not be served as the old one.
    if (sha256Hex(*bytes) != d.chunkSha256[index])
        return Error::make(errc::kIoError, entry->file->string() + " changed after it was published");
    return Chunk{index, std::move(*bytes)};
}

std::optional<std::string> handleTransferRequest(const ResourceTable& table, const Envelope& request)
{
    if (request.type == DescribeRequest::kType) {
        auto describe = decodeBody<DescribeRequest>(request);
        if (!describe)
            return encodeErrorReply(request.id, describe.error());
        auto description = table.describe(describe->resource);
        return description ? encodeReply(*description, request.id) : encodeErrorReply(request.id, description.error());
    }
    if (request.type == FetchRequest::kType) {
        auto fetch = decodeBody<FetchRequest>(request);
        if (!fetch)
            return encodeErrorReply(request.id, fetch.error());
        auto chunk = table.chunk(fetch->resource, fetch->index);
        if (!chunk && chunk.error().code == errc::kIoError) // the server's paths are not the client's business
            return encodeErrorReply(request.id, Error::make(errc::kUnavailable, "the resource cannot be read now"));
        if (!chunk)
            return encodeErrorReply(request.id, chunk.error());
        return encodeReply(FetchReply{fetch->resource, chunk->index, std::move(chunk->data)}, request.id);
    }
    return std::nullopt;
}

} // namespace crowdtrain::net
