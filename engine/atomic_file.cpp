#include "engine/atomic_file.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <random>
#include <unistd.h>

namespace crowdtrain::engine {
namespace {

Error ioError(const std::string& what, const std::filesystem::path& file)
{
    return Error::make("io_error", what + " " + file.string() + ": " + std::strerror(errno));
}

} // namespace

Status writeFileAtomically(const std::filesystem::path& file, std::string_view bytes)
{
    std::random_device entropy;
    const auto temp = file.parent_path()
        / ("." + file.filename().string() + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(entropy()));
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return ioError("cannot create", temp);
    std::size_t written = 0;
    while (written < bytes.size()) {
        const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            // A full disk lands here: the target is left untouched.
            Error error = ioError("cannot write", temp);
            ::close(fd);
            ::unlink(temp.c_str());
            return error;
        }
        written += std::size_t(n);
    }
    if (::fsync(fd) != 0 || ::close(fd) != 0) {
        Error error = ioError("cannot flush", temp);
        ::unlink(temp.c_str());
        return error;
    }
    if (::rename(temp.c_str(), file.c_str()) != 0) {
        Error error = ioError("cannot rename into", file);
        ::unlink(temp.c_str());
        return error;
    }
    const auto folder = file.parent_path().empty() ? std::filesystem::path(".") : file.parent_path();
    if (const int dirFd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dirFd >= 0) {
        ::fsync(dirFd);
        ::close(dirFd);
    }
    return Status::success();
}

Result<std::string> readWholeFile(const std::filesystem::path& file)
{
    std::ifstream in(file, std::ios::binary);
    if (!in)
        return ioError("cannot open", file);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad())
        return ioError("cannot read", file);
    return bytes;
}

} // namespace crowdtrain::engine
