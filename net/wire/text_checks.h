#pragma once

// Checks of the text forms the protocol uses (docs/protocol.md, "Encoding").
// Well-formed UTF-8 is core::isValidUtf8 (core/utf8.h). Pure functions;
// thread-safe.

#include <string_view>

namespace crowdtrain::net {

// 64 lowercase hex digits.
bool isSha256Hex(std::string_view text);
// 40 lowercase hex digits (a BitTorrent v1 info-hash).
bool isInfoHashHex(std::string_view text);
// 40 characters of the Z85 alphabet (a Curve key).
bool isCurveKeyText(std::string_view text);
// [a-z0-9-]{1,64}
bool isProjectName(std::string_view text);
// Text a person's screen shows as it is (a display name): valid UTF-8 with
// no control characters (C0, DEL, C1), no line or paragraph separators and
// no bidirectional formatting (U+200E, U+200F, U+202A..U+202E,
// U+2066..U+2069), which could make a name read as something else.
bool isDisplayText(std::string_view text);

} // namespace crowdtrain::net
