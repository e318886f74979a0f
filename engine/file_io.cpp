#include "engine/file_io.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>
#include <utility>

namespace crowdtrain::engine {

Error ioError(const std::filesystem::path& file, const std::string& what, int errorNumber)
{
    return Error::make("io_error", file.string() + ": " + what + ": " + std::strerror(errorNumber));
}

Result<std::string> readFile(const std::filesystem::path& file)
{
    std::error_code ec;
    if (!std::filesystem::exists(file, ec))
        return Error::make("not_found", file.string() + ": no such file");
    if (std::filesystem::is_directory(file, ec))
        return Error::make("io_error", file.string() + ": is a folder, expected a file");
    std::ifstream in(file, std::ios::binary);
    if (!in)
        return ioError(file, "cannot open", errno);
    std::ostringstream content;
    content << in.rdbuf();
    if (in.bad())
        return ioError(file, "cannot read", errno);
    return std::move(content).str();
}

AtomicFileWriter::AtomicFileWriter(std::filesystem::path file, std::filesystem::path temp, int fd)
    : m_file(std::move(file))
    , m_temp(std::move(temp))
    , m_fd(fd)
{ }

Result<AtomicFileWriter> AtomicFileWriter::create(const std::filesystem::path& file)
{
    std::filesystem::path temp = file;
    temp += ".tmp-" + std::to_string(::getpid());
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return ioError(file, "cannot create", errno);
    return AtomicFileWriter(file, std::move(temp), fd);
}

AtomicFileWriter::AtomicFileWriter(AtomicFileWriter&& other) noexcept
    : m_file(std::move(other.m_file))
    , m_temp(std::move(other.m_temp))
    , m_fd(std::exchange(other.m_fd, -1))
{ }

AtomicFileWriter& AtomicFileWriter::operator=(AtomicFileWriter&& other) noexcept
{
    if (this != &other) {
        discard();
        m_file = std::move(other.m_file);
        m_temp = std::move(other.m_temp);
        m_fd = std::exchange(other.m_fd, -1);
    }
    return *this;
}

AtomicFileWriter::~AtomicFileWriter()
{
    discard();
}

void AtomicFileWriter::discard()
{
    if (m_fd < 0)
        return;
    ::close(m_fd);
    ::unlink(m_temp.c_str());
    m_fd = -1;
}

Status AtomicFileWriter::write(std::string_view bytes)
{
    if (m_fd < 0)
        return Error::make("io_error", m_file.string() + ": write after commit");
    while (!bytes.empty()) {
        const ssize_t written = ::write(m_fd, bytes.data(), bytes.size());
        if (written < 0) {
            if (errno == EINTR)
                continue;
            return ioError(m_file, "cannot write", errno);
        }
        bytes.remove_prefix(static_cast<std::size_t>(written));
    }
    return Status::success();
}

Status AtomicFileWriter::writeAt(uint64_t offset, std::string_view bytes)
{
    if (m_fd < 0)
        return Error::make("io_error", m_file.string() + ": write after commit");
    while (!bytes.empty()) {
        const ssize_t written = ::pwrite(m_fd, bytes.data(), bytes.size(), static_cast<off_t>(offset));
        if (written < 0) {
            if (errno == EINTR)
                continue;
            return ioError(m_file, "cannot write", errno);
        }
        bytes.remove_prefix(static_cast<std::size_t>(written));
        offset += static_cast<uint64_t>(written);
    }
    return Status::success();
}

Status AtomicFileWriter::commit()
{
    if (m_fd < 0)
        return Error::make("io_error", m_file.string() + ": committed twice");
    if (::fsync(m_fd) != 0)
        return ioError(m_file, "cannot sync", errno);
    if (::close(m_fd) != 0) {
        m_fd = -1;
        ::unlink(m_temp.c_str());
        return ioError(m_file, "cannot close", errno);
    }
    m_fd = -1;
    if (::rename(m_temp.c_str(), m_file.c_str()) != 0) {
        const int error = errno;
        ::unlink(m_temp.c_str());
        return ioError(m_file, "cannot rename into place", error);
    }
    // The rename itself is durable only once the folder's entry is synced.
    std::filesystem::path folder = m_file.parent_path();
    if (folder.empty())
        folder = ".";
    const int dirFd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirFd >= 0) {
        ::fsync(dirFd);
        ::close(dirFd);
    }
    return Status::success();
}

Status writeFileAtomically(const std::filesystem::path& file, std::string_view content)
{
    auto writer = AtomicFileWriter::create(file);
    if (!writer)
        return writer.error();
    if (Status status = writer->write(content); !status)
        return status;
    return writer->commit();
}

} // namespace crowdtrain::engine
