#include "core/file_io.h"

#include "core/error_codes.h"

#include <algorithm>
#include <cstring>
#include <fcntl.h>
#include <random>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utility>

namespace crowdtrain::core {

Error ioError(const std::string& what, const std::filesystem::path& file, int errorNumber)
{
    return Error::make(errc::kIoError, what + " " + file.string() + ": " + std::strerror(errorNumber));
}

bool isDiskFull(const Error& error)
{
    return error.code == errc::kIoError && error.message.find(std::strerror(ENOSPC)) != std::string::npos;
}

std::filesystem::path temporarySibling(const std::filesystem::path& path)
{
    static thread_local std::mt19937_64 random{std::random_device{}()};
    const std::filesystem::path target = path.has_filename() ? path : path.parent_path();
    return target.parent_path()
        / ("." + target.filename().string() + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(random()));
}

namespace {

// AtomicFile's write-back window: at most two of them of a file are dirty.
constexpr uint64_t kWriteBackWindow = 8 << 20;

Result<int> openForReading(const std::filesystem::path& file)
{
    int fd = -1;
    do
        fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    while (fd < 0 && errno == EINTR);
    if (fd < 0)
        return errno == ENOENT ? Error::make(errc::kNotFound, file.string() + ": no such file")
                               : ioError("cannot open", file);
    return fd;
}

// The next bytes of `fd` into `buffer`: 0 at the end of the file.
Result<std::size_t> readSome(int fd, char* buffer, std::size_t size, const std::filesystem::path& file)
{
    while (true) {
        const ssize_t n = ::read(fd, buffer, size);
        if (n >= 0)
            return std::size_t(n);
        if (errno == EINTR)
            continue;
        return errno == EISDIR ? Error::make(errc::kIoError, file.string() + ": is a folder, expected a file")
                               : ioError("cannot read", file);
    }
}

} // namespace

Result<std::string> readFile(const std::filesystem::path& file, std::size_t maxBytes)
{
    std::string bytes;
    const Status read = forEachSlice(
        file,
        [&](std::string_view slice) -> Status {
            bytes.append(slice);
            if (bytes.size() > maxBytes)
                return Error::make(
                    errc::kTooLarge, file.string() + " is larger than " + std::to_string(maxBytes) + " bytes");
            return Status::success();
        },
        65536);
    if (!read)
        return read.error();
    return bytes;
}

Status forEachSlice(const std::filesystem::path& file, const std::function<Status(std::string_view slice)>& each,
    std::size_t sliceBytes)
{
    auto fd = openForReading(file);
    if (!fd)
        return fd.error();
    std::string buffer(std::max<std::size_t>(sliceBytes, 1), '\0');
    Status status;
    while (true) {
        auto n = readSome(*fd, buffer.data(), buffer.size(), file);
        if (!n) {
            status = n.error();
            break;
        }
        if (*n == 0)
            break;
        if (status = each(std::string_view(buffer.data(), *n)); !status)
            break;
    }
    ::close(*fd);
    return status;
}

Status writeAt(int fd, uint64_t offset, std::string_view bytes, const std::filesystem::path& file)
{
    while (!bytes.empty()) {
        const ssize_t n = ::pwrite(fd, bytes.data(), bytes.size(), off_t(offset));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return ioError("cannot write", file);
        if (n == 0) // no progress and no errno: a full disk, said as such (isDiskFull)
            return ioError("cannot write", file, ENOSPC);
        bytes.remove_prefix(std::size_t(n));
        offset += uint64_t(n);
    }
    return Status::success();
}

Result<std::string> readAt(int fd, uint64_t offset, std::size_t size, const std::filesystem::path& file)
{
    std::string bytes(size, '\0');
    std::size_t done = 0;
    while (done < size) {
        const ssize_t n = ::pread(fd, bytes.data() + done, size - done, off_t(offset + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return ioError("cannot read", file);
        if (n == 0)
            break;
        done += std::size_t(n);
    }
    bytes.resize(done);
    return bytes;
}

Status writeFileAtomic(const std::filesystem::path& file, std::string_view bytes, mode_t mode)
{
    auto out = AtomicFile::create(file, mode);
    if (!out)
        return out.error();
    if (Status written = out->write(bytes); !written)
        return written;
    return out->commit();
}

Result<AtomicFile> AtomicFile::create(const std::filesystem::path& target, mode_t mode)
{
    // O_EXCL: two writers of the same target never share a temporary file.
    for (int attempt = 0; attempt < 8; ++attempt) {
        std::filesystem::path temporary = temporarySibling(target);
        int fd = -1;
        do
            fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
        while (fd < 0 && errno == EINTR);
        if (fd >= 0) {
            // The umask may have narrowed `mode`.
            if (::fchmod(fd, mode) != 0) {
                Error error = ioError("cannot set the mode of", temporary);
                ::close(fd);
                ::unlink(temporary.c_str());
                return error;
            }
            return AtomicFile(target, std::move(temporary), fd);
        }
        if (errno != EEXIST)
            return ioError("cannot create", temporary);
    }
    return Error::make(errc::kIoError, "cannot find a free temporary name next to " + target.string());
}

AtomicFile::AtomicFile(std::filesystem::path target, std::filesystem::path temporary, int fd)
    : m_target(std::move(target))
    , m_temporary(std::move(temporary))
    , m_fd(fd)
{ }

AtomicFile::AtomicFile(AtomicFile&& other) noexcept
    : m_target(std::move(other.m_target))
    , m_temporary(std::move(other.m_temporary))
    , m_fd(std::exchange(other.m_fd, -1))
    , m_appended(std::exchange(other.m_appended, 0))
    , m_started(std::exchange(other.m_started, 0))
    , m_waited(std::exchange(other.m_waited, 0))
{ }

AtomicFile& AtomicFile::operator=(AtomicFile&& other) noexcept
{
    if (this != &other) {
        discard();
        m_target = std::move(other.m_target);
        m_temporary = std::move(other.m_temporary);
        m_fd = std::exchange(other.m_fd, -1);
        m_appended = std::exchange(other.m_appended, 0);
        m_started = std::exchange(other.m_started, 0);
        m_waited = std::exchange(other.m_waited, 0);
    }
    return *this;
}

AtomicFile::~AtomicFile()
{
    discard();
}

void AtomicFile::discard()
{
    if (m_fd < 0)
        return;
    ::close(m_fd);
    m_fd = -1;
    ::unlink(m_temporary.c_str());
}

Status AtomicFile::writeAt(uint64_t offset, std::string_view bytes)
{
    if (m_fd < 0)
        return Error::make(errc::kIoError, "write to " + m_target.string() + " after it was committed or discarded");
    Status written = core::writeAt(m_fd, offset, bytes, m_target); // the file being replaced, not its temporary
    if (!written)
        discard();
    return written;
}

Status AtomicFile::write(const void* data, std::size_t size)
{
    if (m_fd < 0)
        return Error::make(errc::kIoError, "write to " + m_target.string() + " after it was committed or discarded");
    const char* bytes = static_cast<const char*>(data);
    while (size > 0) {
        const std::size_t room = std::size_t(m_started + kWriteBackWindow - m_appended);
        const ssize_t n = ::write(m_fd, bytes, std::min(size, room));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            // A full disk lands here ("No space left on device", naming the
            // file being replaced): the target is left untouched.
            Error error = ioError("cannot write", m_target, n < 0 ? errno : ENOSPC);
            discard();
            return error;
        }
        bytes += n;
        size -= std::size_t(n);
        m_appended += uint64_t(n);
        if (m_appended - m_started >= kWriteBackWindow)
            writeBack();
    }
    return Status::success();
}

// Errors here are no failure: a file system without sync_file_range writes
// back as it likes, and commit()'s fsync reports what went wrong.
void AtomicFile::writeBack()
{
    if (m_started > m_waited) {
        ::sync_file_range(m_fd, off64_t(m_waited), off64_t(m_started - m_waited),
            SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
        ::posix_fadvise(m_fd, off64_t(m_waited), off64_t(m_started - m_waited), POSIX_FADV_DONTNEED);
    }
    m_waited = m_started;
    ::sync_file_range(m_fd, off64_t(m_started), off64_t(m_appended - m_started), SYNC_FILE_RANGE_WRITE);
    m_started = m_appended;
}

Status AtomicFile::commit()
{
    if (m_fd < 0)
        return Error::make(errc::kIoError, m_target.string() + " was already committed or discarded");
    // Data before the name: without the fsync a crash after the rename can
    // leave the target pointing at an empty or partial file.
    if (::fsync(m_fd) != 0) {
        Error error = ioError("cannot flush", m_target);
        discard();
        return error;
    }
    const int fd = std::exchange(m_fd, -1);
    if (::close(fd) != 0) {
        Error error = ioError("cannot flush", m_target);
        ::unlink(m_temporary.c_str());
        return error;
    }
    if (::rename(m_temporary.c_str(), m_target.c_str()) != 0) {
        Error error = ioError("cannot rename into", m_target);
        ::unlink(m_temporary.c_str());
        return error;
    }
    return syncFolder(m_target.parent_path());
}

Status syncFolder(const std::filesystem::path& folder)
{
    const auto path = folder.empty() ? std::filesystem::path(".") : folder;
    const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return ioError("cannot open folder", path);
    int result = 0;
    do
        result = ::fsync(fd);
    while (result != 0 && errno == EINTR);
    const int error = errno;
    ::close(fd);
    if (result != 0 && error != EINVAL)
        return ioError("cannot flush folder", path, error);
    return Status::success();
}

Result<FolderLock> FolderLock::acquire(const std::filesystem::path& folder)
{
    auto lock = acquireFile(folder / ".lock");
    if (!lock && lock.error().code == errc::kFolderInUse)
        return Error::make(errc::kFolderInUse,
            folder.string() + " is in use by another process (pid " + holderOf(folder / ".lock")
                + "): one crowdtrain-worker or service at a time per folder");
    return lock;
}

Result<FolderLock> FolderLock::acquireFile(const std::filesystem::path& file, mode_t mode)
{
    int fd = -1;
    do
        fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, mode);
    while (fd < 0 && errno == EINTR);
    if (fd < 0)
        return ioError("cannot open", file);
    int result = 0;
    do
        result = ::flock(fd, LOCK_EX | LOCK_NB);
    while (result != 0 && errno == EINTR);
    if (result != 0) {
        const int error = errno;
        ::close(fd);
        if (error != EWOULDBLOCK)
            return ioError("cannot lock", file, error);
        return Error::make(
            errc::kFolderInUse, file.string() + " is held by another process (pid " + holderOf(file) + ")");
    }
    // Who holds it, for the next one's message (best effort: the lock is the flock).
    if (::ftruncate(fd, 0) == 0)
        static_cast<void>(writeAt(fd, 0, std::to_string(::getpid()), file));
    return FolderLock(fd);
}

std::string FolderLock::holderOf(const std::filesystem::path& file)
{
    auto pid = readFile(file, 32);
    if (!pid || pid->empty())
        return "?";
    return *pid;
}

FolderLock::FolderLock(FolderLock&& other) noexcept
    : m_fd(std::exchange(other.m_fd, -1))
{ }

FolderLock& FolderLock::operator=(FolderLock&& other) noexcept
{
    if (this != &other) {
        if (m_fd >= 0)
            ::close(m_fd);
        m_fd = std::exchange(other.m_fd, -1);
    }
    return *this;
}

FolderLock::~FolderLock()
{
    if (m_fd >= 0)
        ::close(m_fd); // releases the flock
}

} // namespace crowdtrain::core
