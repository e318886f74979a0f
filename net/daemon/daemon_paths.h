#pragma once

// Where a volunteer's daemon keeps things, by the XDG base directories:
//   data     $XDG_DATA_HOME/crowdtrain   (~/.local/share/crowdtrain): identity, state, caches, checkpoints
//   config   $XDG_CONFIG_HOME/crowdtrain (~/.config/crowdtrain): settings.json
//   control  $XDG_RUNTIME_DIR/crowdtrain (/tmp/crowdtrain-<uid>): the control API's sockets
// Header-only and free of libtorch, so the command-line client shares it.

#include "core/xdg.h"

#include <filesystem>

namespace crowdtrain::daemon {

inline Result<std::filesystem::path> defaultConfigDir()
{
    return core::xdgConfigFolder("crowdtrain");
}

inline Result<std::filesystem::path> defaultDaemonDataDir()
{
    return core::xdgDataFolder("crowdtrain");
}

} // namespace crowdtrain::daemon
