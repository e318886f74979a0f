#pragma once

// Where the daemon and its clients meet: a private folder holding the two
// ipc:// socket files, "control" (ROUTER, requests) and "events" (PUB).
// Only the folder's owner may use it: the daemon creates it with mode 0700
// and both sides refuse a folder that another user could reach or replace,
// so a socket in it is the daemon's own and talks only to its owner.
// Free functions, thread-safe (they read the environment and the file system).

#include "core/result.h"

#include <filesystem>
#include <string>

namespace crowdtrain::control {

// $XDG_RUNTIME_DIR/crowdtrain; /tmp/crowdtrain-<euid> when XDG_RUNTIME_DIR
// is unset or empty. Error "no_runtime_dir" when it is set to a relative path.
Result<std::filesystem::path> defaultControlDir();

// The daemon's side: creates `dir` (mode 0700; its parent must exist) or
// checks the existing one: a folder (not a symbolic link), owned by this
// process's effective user, with no group or other permission bits.
// Errors: "insecure_control_dir" naming the folder, its owner and mode and
// what is wrong; "io_error". Never changes the mode of an existing folder.
Status preparePrivateDir(const std::filesystem::path& dir);

// A client's side: the same checks without creating anything, then the
// control socket file must exist. Errors: "no_daemon" (no folder, no
// socket file), "insecure_control_dir", "io_error".
Status checkPrivateDir(const std::filesystem::path& dir);

std::string controlEndpoint(const std::filesystem::path& dir); // "ipc://<dir>/control"
std::string eventsEndpoint(const std::filesystem::path& dir); // "ipc://<dir>/events"

} // namespace crowdtrain::control
