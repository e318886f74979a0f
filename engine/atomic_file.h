#pragma once

// Durable, all-or-nothing file writes (design.md, "Security and failure"):
// bytes go to a temporary name in the target's folder, and only commit()
// fsyncs them, renames them over the target and fsyncs the folder, so a crash
// at any moment leaves either the old file or the complete new one.
//
// AtomicFile is move-only and not thread-safe; use one per thread. An
// AtomicFile destroyed without commit() removes its temporary file.

#include "engine/result.h"

#include <cstddef>
#include <filesystem>
#include <string_view>

namespace crowdtrain::engine {

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
    Status write(std::string_view text) { return write(text.data(), text.size()); }

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

// Writes a whole small file atomically (config files, JSON).
Status writeFileAtomically(const std::filesystem::path& target, std::string_view content);

// fsyncs a folder so that renames and new entries in it survive a crash.
Status syncDirectory(const std::filesystem::path& dir);

// A fresh name next to `path` ("<name>.tmp-<pid>-<n>") for temporary files
// and folders; unique within this process and unlikely to clash across them.
std::filesystem::path temporarySibling(const std::filesystem::path& path);

} // namespace crowdtrain::engine
