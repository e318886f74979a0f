#pragma once

// Crash-safe file replacement: write to a temporary name in the same folder,
// fsync, rename over the target, fsync the folder. A reader sees the old file
// or the new one, never a torn one. Thread-safe for distinct targets.

#include "engine/result.h"

#include <filesystem>
#include <string_view>

namespace crowdtrain::engine {

Status writeFileAtomically(const std::filesystem::path& file, std::string_view bytes);

// Reads a whole file; an Error names the file when it cannot be read.
Result<std::string> readWholeFile(const std::filesystem::path& file);

} // namespace crowdtrain::engine
