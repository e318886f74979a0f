#pragma once

// A small file system for the disk-full tests: a tmpfs the test mounts on a
// folder of its own and unmounts when it ends, filled by a filler file to
// leave a chosen number of bytes free, and given its space back by removing
// the filler. Mounting needs root (CI runs as root); whyNot() says why a
// developer's run skips.

#include <QTest>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <optional>
#include <string>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <vector>

namespace crowdtrain::testing {

class SmallDisk {
public:
    SmallDisk() = default;
    SmallDisk(const SmallDisk&) = delete;
    SmallDisk& operator=(const SmallDisk&) = delete;
    ~SmallDisk() { unmount(); }

    // Why a tmpfs cannot be mounted here (the reason to skip), or nothing.
    static std::optional<std::string> whyNot()
    {
        if (::geteuid() != 0)
            return std::string("needs root to mount a tmpfs");
        return std::nullopt;
    }

    // Mounts a tmpfs of `bytes` on `dir` (created when missing); the error
    // when the kernel refuses (a container without CAP_SYS_ADMIN).
    std::optional<std::string> mount(const std::filesystem::path& dir, uint64_t bytes)
    {
        std::filesystem::create_directories(dir);
        const std::string options = "size=" + std::to_string(bytes) + ",mode=0755";
        if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, options.c_str()) != 0)
            return "cannot mount a tmpfs on " + dir.string() + ": " + std::strerror(errno);
        m_dir = dir;
        return std::nullopt;
    }

    void unmount()
    {
        if (!m_dir.empty())
            ::umount2(m_dir.c_str(), MNT_DETACH); // lazily: a process of the test may still hold a file
        m_dir.clear();
    }

    uint64_t freeBytes() const
    {
        struct statvfs fs { };
        if (::statvfs(m_dir.c_str(), &fs) != 0)
            return 0;
        return uint64_t(fs.f_bavail) * fs.f_frsize;
    }

    // Writes a filler file (another one each call) until `leaveBytes` remain
    // free (0: until the disk refuses a byte more).
    void fill(uint64_t leaveBytes)
    {
        const std::filesystem::path filler = m_dir / (".filler-" + std::to_string(m_fillers.size()));
        m_fillers.push_back(filler);
        const int fd = ::open(filler.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0)
            return;
        const std::string block(4096, 'x');
        while (freeBytes() > leaveBytes) {
            const uint64_t room = freeBytes() - leaveBytes;
            if (::write(fd, block.data(), std::size_t(std::min<uint64_t>(room, block.size()))) <= 0)
                break;
        }
        ::close(fd);
    }

    // The space back: the filler files go.
    void release()
    {
        for (const std::filesystem::path& filler : m_fillers)
            std::filesystem::remove(filler);
        m_fillers.clear();
    }

    const std::filesystem::path& dir() const { return m_dir; }

private:
    std::filesystem::path m_dir;
    std::vector<std::filesystem::path> m_fillers;
};

} // namespace crowdtrain::testing
