#include "net/wire/text_checks.h"

#include "core/utf8.h"
#include "net/wire/limits.h"

namespace crowdtrain::net {

bool isDisplayText(std::string_view text)
{
    for (std::size_t i = 0; i < text.size();) {
        const core::Utf8Char c = core::decodeUtf8(text, i);
        if (!c.valid)
            return false;
        i += c.length;
        const char32_t codePoint = c.codePoint;
        const bool control = codePoint < 0x20 || (codePoint >= 0x7F && codePoint <= 0x9F);
        const bool separator = codePoint == 0x2028 || codePoint == 0x2029;
        const bool bidi = codePoint == 0x200E || codePoint == 0x200F || (codePoint >= 0x202A && codePoint <= 0x202E)
            || (codePoint >= 0x2066 && codePoint <= 0x2069);
        if (control || separator || bidi)
            return false;
    }
    return true;
}

namespace {

bool isLowerHex(std::string_view text, std::size_t chars)
{
    if (text.size() != chars)
        return false;
    for (char c : text)
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return false;
    return true;
}

} // namespace

bool isSha256Hex(std::string_view text)
{
    return isLowerHex(text, kSha256HexChars);
}

bool isInfoHashHex(std::string_view text)
{
    return isLowerHex(text, 40);
}

bool isCurveKeyText(std::string_view text)
{
    static constexpr std::string_view kZ85
        = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";
    if (text.size() != kCurveKeyChars)
        return false;
    for (char c : text)
        if (kZ85.find(c) == std::string_view::npos)
            return false;
    return true;
}

bool isProjectName(std::string_view text)
{
    if (text.empty() || text.size() > kMaxProjectNameChars)
        return false;
    for (char c : text)
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'))
            return false;
    return true;
}

} // namespace crowdtrain::net
