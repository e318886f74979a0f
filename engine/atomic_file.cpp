#include "engine/atomic_file.h"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>
#include <system_error>
#include <utility>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace crowdtrain::engine {
namespace {

Error ioError(const std::string& what, const std::filesystem::path& path, int errorNumber)
{
    return Error::make("io_error", what + " '" + path.string() + "': " + std::strerror(errorNumber));
}

} // namespace

std::filesystem::path temporarySibling(const std::filesystem::path& path)
{
    static std::atomic<unsigned long> counter{0};
    std::string name = path.filename().string();
    if (name.empty())
        name = path.parent_path().filename().string();
    name += ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter.fetch_add(1));
    return path.parent_path() / name;
}

Result<AtomicFile> AtomicFile::create(const std::filesystem::path& target)
{
    // O_EXCL so that two writers never share a temporary file; the mode lets
    // the umask decide permissions, as for any other file the user creates.
    for (int attempt = 0; attempt < 16; ++attempt) {
        std::filesystem::path temporary = temporarySibling(target);
        const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd >= 0)
            return AtomicFile(target, std::move(temporary), fd);
        if (errno != EEXIST)
            return ioError("cannot create a temporary file for", target, errno);
    }
    return Error::make("io_error", "cannot find a free temporary name for '" + target.string() + "'");
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
{ }

AtomicFile& AtomicFile::operator=(AtomicFile&& other) noexcept
{
    if (this != &other) {
        discard();
        m_target = std::move(other.m_target);
        m_temporary = std::move(other.m_temporary);
        m_fd = std::exchange(other.m_fd, -1);
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

Status AtomicFile::write(const void* data, std::size_t size)
{
    if (m_fd < 0)
        return Error::make("io_error", "write to '" + m_target.string() + "' after it was committed or discarded");
    const char* bytes = static_cast<const char*>(data);
    while (size > 0) {
        const ssize_t written = ::write(m_fd, bytes, size);
        if (written < 0) {
            if (errno == EINTR)
                continue;
            return ioError("cannot write", m_temporary, errno);
        }
        bytes += written;
        size -= static_cast<std::size_t>(written);
    }
    return Status::success();
}

Status AtomicFile::commit()
{
    if (m_fd < 0)
        return Error::make("io_error", "'" + m_target.string() + "' was already committed or discarded");
    // Data first, then the name: without the fsync a crash after the rename
    // can leave the target name pointing at an empty or partial file.
    if (::fsync(m_fd) != 0) {
        const int error = errno;
        discard();
        return ioError("cannot fsync", m_temporary, error);
    }
    const int fd = std::exchange(m_fd, -1);
    if (::close(fd) != 0) {
        const int error = errno;
        ::unlink(m_temporary.c_str());
        return ioError("cannot close", m_temporary, error);
    }
    if (::rename(m_temporary.c_str(), m_target.c_str()) != 0) {
        const int error = errno;
        ::unlink(m_temporary.c_str());
        return ioError("cannot rename a temporary file to", m_target, error);
    }
    return syncDirectory(m_target.parent_path());
}

Status writeFileAtomically(const std::filesystem::path& target, std::string_view content)
{
    auto file = AtomicFile::create(target);
    if (!file)
        return file.error();
    if (Status written = file->write(content); !written)
        return written;
    return file->commit();
}

Status syncDirectory(const std::filesystem::path& dir)
{
    const std::filesystem::path folder = dir.empty() ? std::filesystem::path(".") : dir;
    const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return ioError("cannot open folder", folder, errno);
    const int result = ::fsync(fd);
    const int error = errno;
    ::close(fd);
    if (result != 0)
        return ioError("cannot fsync folder", folder, error);
    return Status::success();
}

} // namespace crowdtrain::engine
