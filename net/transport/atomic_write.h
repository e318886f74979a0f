#pragma once

// Crash-safe replacement of small files for the net layer (key files, transfer
// progress), without the engine (which would bring libtorch): write a
// temporary sibling with the given mode, fsync, rename over the target, fsync
// the folder. A reader sees the old file or the new one. Thread-safe for
// distinct targets.

#include "engine/result.h"

#include <filesystem>
#include <string_view>
#include <sys/types.h>

namespace crowdtrain::net {

Status writeFileAtomic(const std::filesystem::path& file, std::string_view bytes, mode_t mode = 0644);

// fsyncs a folder so that renames in it survive a crash.
Status syncFolder(const std::filesystem::path& folder);

// Reads a whole file of at most maxBytes; the Error names the file.
Result<std::string> readSmallFile(const std::filesystem::path& file, std::size_t maxBytes);

} // namespace crowdtrain::net
