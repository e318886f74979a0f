#pragma once

// Crash-safe file replacement: write to a temporary name in the same folder,
// fsync, rename over the target, fsync the folder. A reader sees the old file
// or the new one, never a torn one. Thread-safe for distinct targets.
//
// writeFileAtomically() does it for bytes already in memory; AtomicFile
// streams large files (checkpoints) piece by piece. An AtomicFile is
// move-only and used by one thread; destroyed without commit(), it removes
// its temporary file and leaves the target untouched.

#include "engine/result.h"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace crowdtrain::engine {

Status writeFileAtomically(const std::filesystem::path& file, std::string_view bytes);

// Reads a whole file; an Error names the file when it cannot be read.
Result<std::string> readWholeFile(const std::filesystem::path& file);

class AtomicFile {
public:
    // Creates the temporary file next to `target`; `target` itself is not
    // touched until commit().
    static Result<AtomicFile> create(const std::filesystem::path& target);

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

    std::filesystem::path m_target;
    std::filesystem::path m_temporary;
    int m_fd = -1;
};

// fsyncs a folder so that renames and new entries in it survive a crash.
Status syncDirectory(const std::filesystem::path& dir);

// A fresh hidden name next to `path` (".<name>.tmp-<pid>-<random>") for
// temporary files and folders that are renamed into place when complete.
std::filesystem::path temporarySibling(const std::filesystem::path& path);

} // namespace crowdtrain::engine
