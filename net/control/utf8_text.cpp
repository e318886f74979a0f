#include "net/control/utf8_text.h"

#include "net/wire/text_checks.h"

#include <algorithm>

namespace crowdtrain::control {

namespace {

// The length of the sequence a lead byte announces (1 for ASCII and for
// bytes that cannot lead one).
std::size_t sequenceLength(unsigned char lead)
{
    if ((lead & 0xE0) == 0xC0)
        return 2;
    if ((lead & 0xF0) == 0xE0)
        return 3;
    if ((lead & 0xF8) == 0xF0)
        return 4;
    return 1;
}

constexpr std::string_view kReplacement = "\xEF\xBF\xBD"; // U+FFFD

} // namespace

std::string toValidUtf8(std::string_view text, std::size_t maxBytes)
{
    std::string out;
    out.reserve(std::min(text.size(), maxBytes));
    for (std::size_t i = 0; i < text.size();) {
        const auto lead = static_cast<unsigned char>(text[i]);
        std::size_t length = sequenceLength(lead);
        std::string_view piece = text.substr(i, length);
        if (lead >= 0x80 && (length == 1 || piece.size() != length || !net::isValidUtf8(piece))) {
            piece = kReplacement;
            length = 1;
        }
        if (out.size() + piece.size() > maxBytes)
            break;
        out += piece;
        i += length;
    }
    return out;
}

} // namespace crowdtrain::control
