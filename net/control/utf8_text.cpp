#include "net/control/utf8_text.h"

#include "core/utf8.h"

#include <algorithm>

namespace crowdtrain::control {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD"; // U+FFFD

} // namespace

std::string toValidUtf8(std::string_view text, std::size_t maxBytes)
{
    std::string out;
    out.reserve(std::min(text.size(), maxBytes));
    for (std::size_t i = 0; i < text.size();) {
        // An invalid or truncated sequence is replaced one byte at a time, so
        // the valid characters after it survive.
        const core::Utf8Char c = core::decodeUtf8(text, i);
        const std::string_view piece = c.valid ? text.substr(i, c.length) : kReplacement;
        if (out.size() + piece.size() > maxBytes)
            break;
        out += piece;
        i += c.length;
    }
    return out;
}

} // namespace crowdtrain::control
