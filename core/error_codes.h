#pragma once

// The error codes core/ itself returns; the engine's and the wire's lists
// (engine/error_codes.h, net/wire/error_codes.h) spell the same words.
// Header-only.

#include <string_view>

namespace crowdtrain::core::errc {

inline constexpr std::string_view kIoError = "io_error";
inline constexpr std::string_view kNotFound = "not_found";
inline constexpr std::string_view kTooLarge = "too_large";
inline constexpr std::string_view kFolderInUse = "folder_in_use"; // another process holds it (FolderLock)
inline constexpr std::string_view kNoDataDir = "no_data_dir"; // no usable XDG or HOME folder

} // namespace crowdtrain::core::errc
