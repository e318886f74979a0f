#pragma once

// File helpers shared by the data pipeline: whole-file reads with errors
// that name the file, and writes that never leave a half-written file under
// the final name (engine/atomic_file.h).

#include "core/result.h"
#include "engine/atomic_file.h" // writeFileAtomically, AtomicFile

#include <filesystem>
#include <string>
#include <string_view>

namespace crowdtrain::engine {

Result<std::string> readFile(const std::filesystem::path& file);

// Error for a failed system call on `file`, with errno's text.
Error ioError(const std::filesystem::path& file, const std::string& what, int errorNumber);

} // namespace crowdtrain::engine
