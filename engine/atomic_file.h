#pragma once

// Crash-safe file replacement and whole-file reads now live in core/
// (core/file_io.h); these names keep the engine's and the coordinator's
// callers as they were. New code includes core/file_io.h.

#include "core/file_io.h"

#include <filesystem>
#include <string>
#include <string_view>

namespace crowdtrain::engine {

using core::AtomicFile;
using core::temporarySibling;

inline Status writeFileAtomically(const std::filesystem::path& file, std::string_view bytes)
{
    return core::writeFileAtomic(file, bytes);
}

inline Result<std::string> readWholeFile(const std::filesystem::path& file)
{
    return core::readFile(file);
}

inline Status syncDirectory(const std::filesystem::path& dir)
{
    return core::syncFolder(dir);
}

} // namespace crowdtrain::engine
