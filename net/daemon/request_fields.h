#pragma once

// The control API's request fields, checked once at the edge
// (docs/protocol.md 12.2): a field of the wrong type is a "bad_request",
// never silently replaced by a default, and every project name the daemon
// takes (and later turns into a folder) follows the wire's name rule,
// net::isProjectName ([a-z0-9-]{1,64}), before anything else happens.
// An absent field, or one set to nil, is "not given".
// Pure functions; thread-safe.

#include "core/result.h"
#include "net/control/value.h"

#include <optional>
#include <string>
#include <string_view>

namespace crowdtrain::daemon {

Error badRequest(const std::string& message);

// Text, 1 byte or more.
Result<std::string> requiredText(const control::Value& body, std::string_view key);
Result<std::optional<std::string>> optionalText(const control::Value& body, std::string_view key);
// A project name by the wire's rule.
Result<std::string> requiredName(const control::Value& body, std::string_view key);
Result<std::optional<std::string>> optionalName(const control::Value& body, std::string_view key);
// Why `name` is not a project name ("" when it is).
std::string nameProblem(std::string_view key, std::string_view name);

Result<std::optional<bool>> optionalBool(const control::Value& body, std::string_view key);
// An integer in [min, max].
Result<std::optional<int64_t>> optionalInt(const control::Value& body, std::string_view key, int64_t min, int64_t max);
// A non-negative integer (uint64).
Result<uint64_t> requiredUInt(const control::Value& body, std::string_view key);
Result<std::optional<uint64_t>> optionalUInt(const control::Value& body, std::string_view key);
// An integer or a float, in [min, max].
Result<std::optional<double>> optionalNumber(const control::Value& body, std::string_view key, double min, double max);

} // namespace crowdtrain::daemon
