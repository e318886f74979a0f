#pragma once

// Crash-safe replacement of small files and bounded reads now live in core/
// (core/file_io.h); these names keep the coordinator's callers as they
// were. New code includes core/file_io.h.

#include "core/file_io.h"

#include <filesystem>
#include <string>
#include <string_view>

namespace crowdtrain::net {

using core::syncFolder;
using core::writeFileAtomic;

inline Result<std::string> readSmallFile(const std::filesystem::path& file, std::size_t maxBytes)
{
    return core::readFile(file, maxBytes);
}

} // namespace crowdtrain::net
