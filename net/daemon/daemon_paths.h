#pragma once

// Where a volunteer's daemon keeps things, by the XDG base directories:
//   data     $XDG_DATA_HOME/crowdtrain   (~/.local/share/crowdtrain): identity, state, caches, checkpoints
//   config   $XDG_CONFIG_HOME/crowdtrain (~/.config/crowdtrain): settings.json
//   control  $XDG_RUNTIME_DIR/crowdtrain (/tmp/crowdtrain-<uid>): the control API's sockets
// Header-only and free of libtorch, so the command-line client shares it.

#include "engine/result.h"
#include "net/wire/error_codes.h"

#include <cstdlib>
#include <filesystem>

namespace crowdtrain::daemon {

inline Result<std::filesystem::path> xdgFolder(const char* variable, const char* fallbackUnderHome)
{
    if (const char* set = std::getenv(variable); set && *set) {
        const std::filesystem::path dir(set);
        if (!dir.is_absolute())
            return Error::make(net::errc::kNoDataDir, std::string(variable) + " is not an absolute path");
        return dir / "crowdtrain";
    }
    const char* home = std::getenv("HOME");
    if (!home || !*home || !std::filesystem::path(home).is_absolute())
        return Error::make(net::errc::kNoDataDir, std::string("neither ") + variable + " nor HOME is set");
    return std::filesystem::path(home) / fallbackUnderHome / "crowdtrain";
}

inline Result<std::filesystem::path> defaultConfigDir()
{
    return xdgFolder("XDG_CONFIG_HOME", ".config");
}

inline Result<std::filesystem::path> defaultDaemonDataDir()
{
    return xdgFolder("XDG_DATA_HOME", ".local/share");
}

} // namespace crowdtrain::daemon
