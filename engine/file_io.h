#pragma once

// File helpers shared by the data pipeline: whole-file reads with errors
// that name the file, and writes that never leave a half-written file under
// the final name (write a temporary name, fsync, rename, fsync the folder).
// An AtomicFileWriter is used by one thread at a time.

#include "engine/result.h"

#include <filesystem>
#include <string>
#include <string_view>

namespace crowdtrain::engine {

Result<std::string> readFile(const std::filesystem::path& file);

// Error for a failed system call on `file`, with errno's text.
Error ioError(const std::filesystem::path& file, const std::string& what, int errorNumber);

class AtomicFileWriter {
public:
    // Creates "<file>.tmp-<pid>" next to `file`.
    static Result<AtomicFileWriter> create(const std::filesystem::path& file);

    AtomicFileWriter(AtomicFileWriter&& other) noexcept;
    AtomicFileWriter& operator=(AtomicFileWriter&& other) noexcept;
    AtomicFileWriter(const AtomicFileWriter&) = delete;
    AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
    // Removes the temporary file unless commit() succeeded.
    ~AtomicFileWriter();

    Status write(std::string_view bytes);
    // Overwrites bytes already written (a header filled in at the end).
    Status writeAt(uint64_t offset, std::string_view bytes);
    // fsyncs, renames to the final name and fsyncs the folder.
    Status commit();

    const std::filesystem::path& file() const { return m_file; }

private:
    AtomicFileWriter(std::filesystem::path file, std::filesystem::path temp, int fd);
    void discard();

    std::filesystem::path m_file;
    std::filesystem::path m_temp;
    int m_fd = -1;
};

Status writeFileAtomically(const std::filesystem::path& file, std::string_view content);

} // namespace crowdtrain::engine
