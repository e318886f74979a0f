#pragma once

// Checks of the text forms the protocol uses (docs/protocol.md, "Encoding").
// Pure functions; thread-safe.

#include <string_view>

namespace crowdtrain::net {

// Well-formed UTF-8: no overlong forms, no surrogates, nothing past U+10FFFF.
bool isValidUtf8(std::string_view text);
// 64 lowercase hex digits.
bool isSha256Hex(std::string_view text);
// 40 characters of the Z85 alphabet (a Curve key).
bool isCurveKeyText(std::string_view text);
// [a-z0-9-]{1,64}
bool isProjectName(std::string_view text);

} // namespace crowdtrain::net
