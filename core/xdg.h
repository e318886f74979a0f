#pragma once

// The XDG base directories, with the specification's one rule for every
// program: $XDG_..._HOME when it is an absolute path (a relative one is
// invalid and ignored), else $HOME/<fallback> when HOME is absolute, else
// the error "no_data_dir". Header-only; the env wrappers read the
// environment.

#include "core/error_codes.h"
#include "core/result.h"

#include <cstdlib>
#include <filesystem>
#include <string>

namespace crowdtrain::core {

// <base>/<app> from the given values (for tests; nullptr: unset).
inline Result<std::filesystem::path> xdgFolder(
    const char* xdgValue, const char* home, const char* fallbackUnderHome, const char* app)
{
    if (xdgValue && *xdgValue && std::filesystem::path(xdgValue).is_absolute())
        return std::filesystem::path(xdgValue) / app;
    if (home && *home && std::filesystem::path(home).is_absolute())
        return std::filesystem::path(home) / fallbackUnderHome / app;
    return Error::make(errc::kNoDataDir,
        std::string("neither the XDG folder variable nor HOME names an absolute folder (looking for ") + app + ")");
}

// $XDG_DATA_HOME/<app> (~/.local/share/<app>).
inline Result<std::filesystem::path> xdgDataFolder(const char* app)
{
    return xdgFolder(std::getenv("XDG_DATA_HOME"), std::getenv("HOME"), ".local/share", app);
}

// $XDG_CONFIG_HOME/<app> (~/.config/<app>).
inline Result<std::filesystem::path> xdgConfigFolder(const char* app)
{
    return xdgFolder(std::getenv("XDG_CONFIG_HOME"), std::getenv("HOME"), ".config", app);
}

} // namespace crowdtrain::core
