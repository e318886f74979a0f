#include "net/control/control_paths.h"

#include "net/control/control_protocol.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/stat.h>
#include <unistd.h>

namespace crowdtrain::control {

namespace {

std::string modeText(mode_t mode)
{
    char text[8];
    std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
    return text;
}

Error insecure(const std::filesystem::path& dir, const struct stat& info, const std::string& problem)
{
    return Error::make(errc::kInsecureControlDir,
        "the control folder " + dir.string() + " (owner uid " + std::to_string(info.st_uid) + ", mode "
            + modeText(info.st_mode) + ") " + problem);
}

// The folder is ours alone: anyone else who could write to it could put a
// socket of their own in the daemon's place, or talk to the daemon.
Status checkOwnedFolder(const std::filesystem::path& dir, const struct stat& info)
{
    if (S_ISLNK(info.st_mode))
        return insecure(dir, info, "is a symbolic link; remove it and let the daemon create the folder");
    if (!S_ISDIR(info.st_mode))
        return insecure(dir, info, "is not a folder; remove it and let the daemon create the folder");
    if (info.st_uid != geteuid())
        return insecure(dir, info,
            "belongs to another user (you are uid " + std::to_string(geteuid())
                + "); remove it or set XDG_RUNTIME_DIR to a folder of your own");
    if ((info.st_mode & 077) != 0)
        return insecure(dir, info, "lets group or other users in; run: chmod 700 '" + dir.string() + "'");
    return Status::success();
}

Error ioError(const std::string& what, const std::filesystem::path& path, int error)
{
    return Error::make(errc::kIoError, what + " " + path.string() + ": " + std::strerror(error));
}

} // namespace

Result<std::filesystem::path> defaultControlDir()
{
    const char* runtime = std::getenv("XDG_RUNTIME_DIR");
    if (!runtime || !*runtime)
        return std::filesystem::path("/tmp") / ("crowdtrain-" + std::to_string(geteuid()));
    const std::filesystem::path base(runtime);
    if (!base.is_absolute())
        return Error::make(errc::kNoRuntimeDir,
            "XDG_RUNTIME_DIR is \"" + base.string() + "\", not an absolute path; fix it or unset it");
    return base / "crowdtrain";
}

Status preparePrivateDir(const std::filesystem::path& dir)
{
    if (::mkdir(dir.c_str(), 0700) == 0) {
        // mkdir applies the umask, which can only remove bits; an owner
        // without rwx could not bind its sockets, so set the mode exactly.
        if (::chmod(dir.c_str(), 0700) != 0)
            return ioError("cannot set the mode of the control folder", dir, errno);
    } else if (errno != EEXIST) {
        return ioError("cannot create the control folder", dir, errno);
    }
    struct stat info { };
    if (::lstat(dir.c_str(), &info) != 0)
        return ioError("cannot read the control folder", dir, errno);
    return checkOwnedFolder(dir, info);
}

Status checkPrivateDir(const std::filesystem::path& dir)
{
    struct stat info { };
    if (::lstat(dir.c_str(), &info) != 0) {
        if (errno == ENOENT)
            return Error::make(
                errc::kNoDaemon, "no Crowdtrain daemon is running (" + dir.string() + " does not exist)");
        return ioError("cannot read the control folder", dir, errno);
    }
    if (Status owned = checkOwnedFolder(dir, info); !owned)
        return owned;
    const std::filesystem::path socket = dir / kControlSocketName;
    struct stat socketInfo { };
    if (::lstat(socket.c_str(), &socketInfo) != 0) {
        if (errno == ENOENT)
            return Error::make(
                errc::kNoDaemon, "no Crowdtrain daemon is running (" + socket.string() + " does not exist)");
        return ioError("cannot read the control socket", socket, errno);
    }
    return Status::success();
}

std::string controlEndpoint(const std::filesystem::path& dir)
{
    return "ipc://" + (dir / kControlSocketName).string();
}

std::string eventsEndpoint(const std::filesystem::path& dir)
{
    return "ipc://" + (dir / kEventsSocketName).string();
}

} // namespace crowdtrain::control
