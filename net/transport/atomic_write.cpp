#include "net/transport/atomic_write.h"

#include "net/wire/error_codes.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <random>
#include <sys/stat.h>
#include <unistd.h>

namespace crowdtrain::net {

namespace {

Error ioError(const std::string& what, const std::filesystem::path& file)
{
    return Error::make(errc::kIoError, what + " " + file.string() + ": " + std::strerror(errno));
}

std::filesystem::path temporaryFor(const std::filesystem::path& file)
{
    std::random_device random;
    return file.parent_path()
        / ("." + file.filename().string() + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(random()));
}

} // namespace

Status syncFolder(const std::filesystem::path& folder)
{
    const std::filesystem::path path = folder.empty() ? std::filesystem::path(".") : folder;
    const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return ioError("cannot open folder", path);
    const int rc = ::fsync(fd);
    ::close(fd);
    if (rc != 0)
        return ioError("cannot sync folder", path);
    return Status::success();
}

Status writeFileAtomic(const std::filesystem::path& file, std::string_view bytes, mode_t mode)
{
    const std::filesystem::path temporary = temporaryFor(file);
    const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd < 0)
        return ioError("cannot create", temporary);
    // The umask may have narrowed `mode`; a key file must not be wider either.
    bool ok = ::fchmod(fd, mode) == 0;
    std::size_t written = 0;
    while (ok && written < bytes.size()) {
        const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
        if (n < 0 && errno == EINTR)
            continue;
        ok = n > 0;
        if (ok)
            written += static_cast<std::size_t>(n);
    }
    ok = ok && ::fsync(fd) == 0;
    Error error = ok ? Error{} : ioError("cannot write", temporary);
    if (::close(fd) != 0 && ok) {
        ok = false;
        error = ioError("cannot close", temporary);
    }
    if (ok && ::rename(temporary.c_str(), file.c_str()) != 0) {
        ok = false;
        error = ioError("cannot rename into", file);
    }
    if (!ok) {
        ::unlink(temporary.c_str());
        return error;
    }
    return syncFolder(file.parent_path());
}

Result<std::string> readSmallFile(const std::filesystem::path& file, std::size_t maxBytes)
{
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ioError("cannot open", file);
    std::string bytes;
    char buffer[4096];
    while (true) {
        const ssize_t n = ::read(fd, buffer, sizeof buffer);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            Error error = ioError("cannot read", file);
            ::close(fd);
            return error;
        }
        if (n == 0)
            break;
        bytes.append(buffer, static_cast<std::size_t>(n));
        if (bytes.size() > maxBytes) {
            ::close(fd);
            return Error::make(
                errc::kTooLarge, file.string() + " is larger than " + std::to_string(maxBytes) + " bytes");
        }
    }
    ::close(fd);
    return bytes;
}

} // namespace crowdtrain::net
