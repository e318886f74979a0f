#pragma once

// Files, one way for every layer: whole-file reads (bounded when asked) and
// crash-safe replacement (write a temporary sibling, fsync, rename over the
// target, fsync the folder: a reader sees the old file or the new one, never
// a torn one). Every system call is retried on EINTR; every error names the
// file. Thread-safe for distinct targets.
//
// writeFileAtomic() does it for bytes already in memory; AtomicFile streams
// large files (checkpoints) piece by piece. An AtomicFile is move-only and
// used by one thread; destroyed without commit(), it removes its temporary
// file and leaves the target untouched.

#include "core/result.h"

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <sys/types.h>

namespace crowdtrain::core {

inline constexpr std::size_t kNoSizeLimit = std::numeric_limits<std::size_t>::max();

// The whole file. Errors: "not_found" (no such file), "too_large" (more
// than maxBytes), "io_error" (a folder, unreadable, ...).
Result<std::string> readFile(const std::filesystem::path& file, std::size_t maxBytes = kNoSizeLimit);

// The file slice by slice, in order, at most sliceBytes at a time, for
// files larger than a caller wants to hold; `each` may stop the walk by
// returning an error, which is returned. Errors: as readFile().
Status forEachSlice(const std::filesystem::path& file, const std::function<Status(std::string_view slice)>& each,
    std::size_t sliceBytes = std::size_t(4) << 20);

// All of `bytes` at `offset` of the open file `fd` (pwrite until done: a
// full disk is an error, never a short write). `file` names it in errors.
Status writeAt(int fd, uint64_t offset, std::string_view bytes, const std::filesystem::path& file);

// Up to `size` bytes at `offset` of the open file `fd`: fewer only where the
// file ends. `file` names it in errors.
Result<std::string> readAt(int fd, uint64_t offset, std::size_t size, const std::filesystem::path& file);

// `mode` is applied exactly (the umask does not narrow it, a key file is
// never wider).
Status writeFileAtomic(const std::filesystem::path& file, std::string_view bytes, mode_t mode = 0644);

// Writes a new file under a temporary name and puts it in place by rename.
// A big file is written back to the disk as it grows, a window at a time
// (sync_file_range), so that it never holds GBs of dirty pages: another
// thread's small fsync on the same file system (a loop recording a task)
// then waits for at most a window of this file's data, not for all of it.
// The windows written back leave the page cache (POSIX_FADV_DONTNEED): a
// coordinator writing GBs a round does not fill the machine's memory with
// them, where the kernel's reclaim and compaction would stall every
// thread's allocations, the loop's included (bench/RESULTS.md, GPT-2).
class AtomicFile {
public:
    // Creates the temporary file next to `target`; `target` itself is not
    // touched until commit().
    static Result<AtomicFile> create(const std::filesystem::path& target, mode_t mode = 0644);
    AtomicFile(AtomicFile&& other) noexcept;
    AtomicFile& operator=(AtomicFile&& other) noexcept;
    AtomicFile(const AtomicFile&) = delete;
    AtomicFile& operator=(const AtomicFile&) = delete;
    ~AtomicFile();

    Status write(const void* data, std::size_t size);
    Status write(std::string_view bytes) { return write(bytes.data(), bytes.size()); }
    // Overwrites bytes already written (a header filled in at the end).
    Status writeAt(uint64_t offset, std::string_view bytes);
    // Makes the new content durable and visible under the target name.
    Status commit();
    const std::filesystem::path& target() const { return m_target; }

private:
    AtomicFile(std::filesystem::path target, std::filesystem::path temporary, int fd);
    void discard();
    // Starts the write-back of what was appended since the last call and
    // waits for the window before it.
    void writeBack();

    std::filesystem::path m_target;
    std::filesystem::path m_temporary;
    int m_fd = -1;
    uint64_t m_appended = 0; // bytes write() appended
    uint64_t m_started = 0; // write-back started up to here
    uint64_t m_waited = 0; // written back up to here
};

// An exclusive advisory lock (flock) on `<folder>/.lock`, held while the
// object lives: one process at a time works in the folder. The lock goes
// with the process, so a killed holder never leaves the folder locked.
// Errors: "folder_in_use" (another holder: the message names the pid it wrote
// into the file), "io_error".
class FolderLock {
public:
    static Result<FolderLock> acquire(const std::filesystem::path& folder);
    // The same lock on a named file (a daemon's single-instance lock);
    // "folder_in_use" names the file and its holder's pid.
    static Result<FolderLock> acquireFile(const std::filesystem::path& file, mode_t mode = 0644);
    // The pid the holder of `file`'s lock wrote into it; "?" when unknown.
    static std::string holderOf(const std::filesystem::path& file);
    FolderLock(FolderLock&& other) noexcept;
    FolderLock& operator=(FolderLock&& other) noexcept;
    FolderLock(const FolderLock&) = delete;
    FolderLock& operator=(const FolderLock&) = delete;
    ~FolderLock();

private:
    explicit FolderLock(int fd)
        : m_fd(fd)
    { }
    int m_fd = -1;
};

// fsyncs a folder so that renames and new entries in it survive a crash
// (a file system that cannot sync folders, EINVAL, is no failure).
Status syncFolder(const std::filesystem::path& folder);

// A fresh hidden name next to `path` (".<name>.tmp-<pid>-<random>") for
// temporary files and folders that are renamed into place when complete.
std::filesystem::path temporarySibling(const std::filesystem::path& path);

// "io_error": "<what> <file>: <errno's text>".
Error ioError(const std::string& what, const std::filesystem::path& file, int errorNumber = errno);

// Whether `error` is a write that found the disk full (ioError with ENOSPC:
// "No space left on device"): unlike other I/O errors, worth trying again
// once space returns.
bool isDiskFull(const Error& error);

} // namespace crowdtrain::core
