#pragma once

// The daemon's own JSON files read back at start (daemon.json,
// data_usage.json, a download's job.json): a file that is truncated,
// garbage, of the wrong shape or with a key of the wrong type is never
// trusted and never fatal: it is renamed aside (<name>.bad-<unix ms>) and
// the caller starts without it, with a notice saying so (status "notices"
// and the log). settings.json has its own, older rule (settings.h).
// Pure functions on the file system; thread-safe.

#include <nlohmann/json.hpp>

#include <filesystem>
#include <functional>
#include <optional>
#include <string>

namespace crowdtrain::daemon {

// Says what is wrong with a parsed file ("" when nothing is).
using StateCheck = std::function<std::string(const nlohmann::json& root)>;

// The file's JSON object when it passes `check`; nullopt when absent (no
// notice) or when set aside (`notice` says so).
std::optional<nlohmann::json> readStateFile(
    const std::filesystem::path& file, std::size_t maxBytes, const StateCheck& check, std::string& notice);

// Renames `file` to <file>.bad-<unix ms>; the notice names both and `why`.
std::string setAside(const std::filesystem::path& file, const std::string& why);

// Helpers for checks: "" or what is wrong with root[key].
std::string expectString(const nlohmann::json& root, const char* key);
std::string expectBool(const nlohmann::json& root, const char* key);
std::string expectUnsigned(const nlohmann::json& root, const char* key);
std::string expectInteger(const nlohmann::json& root, const char* key);

} // namespace crowdtrain::daemon
