#include "core/utf8.h"

#include <cstdio>
#include <utility>

namespace crowdtrain::core {

namespace {

// What a lead byte of a multi-byte sequence allows. The second byte's range
// excludes overlong forms, surrogates and code points above U+10FFFF (RFC
// 3629's table); later bytes are 0x80..0xBF.
struct LeadByte {
    uint32_t length = 0; // 0: not a lead byte of a multi-byte sequence
    char32_t bits = 0; // the code point's bits in the lead byte
    unsigned char secondLow = 0x80;
    unsigned char secondHigh = 0xBF;
};

LeadByte leadByte(unsigned char lead)
{
    LeadByte info;
    if (lead >= 0xC2 && lead <= 0xDF) {
        info.length = 2;
        info.bits = lead & 0x1F;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
        info.length = 3;
        info.bits = lead & 0x0F;
        if (lead == 0xE0)
            info.secondLow = 0xA0;
        else if (lead == 0xED)
            info.secondHigh = 0x9F;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
        info.length = 4;
        info.bits = lead & 0x07;
        if (lead == 0xF0)
            info.secondLow = 0x90;
        else if (lead == 0xF4)
            info.secondHigh = 0x8F;
    }
    return info;
}

// Whether byte i (i >= 1) of a sequence with this lead is allowed.
bool continues(const LeadByte& lead, uint32_t i, unsigned char byte)
{
    const unsigned char low = i == 1 ? lead.secondLow : 0x80;
    const unsigned char high = i == 1 ? lead.secondHigh : 0xBF;
    return byte >= low && byte <= high;
}

} // namespace

Utf8Char decodeUtf8(std::string_view text, std::size_t pos)
{
    const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
    const unsigned char first = byte(pos);
    const Utf8Char invalid{first, 1, false};
    if (first < 0x80)
        return {first, 1, true};
    const LeadByte lead = leadByte(first);
    if (lead.length == 0 || pos + lead.length > text.size())
        return invalid;
    char32_t codePoint = lead.bits;
    for (uint32_t i = 1; i < lead.length; ++i) {
        if (!continues(lead, i, byte(pos + i)))
            return invalid;
        codePoint = (codePoint << 6) | (byte(pos + i) & 0x3F);
    }
    return {codePoint, lead.length, true};
}

std::size_t completeUtf8Length(std::string_view bytes)
{
    // An incomplete character is at most 3 bytes: a lead and up to 2 of its
    // continuation bytes. Find the last byte that is not a continuation byte.
    const std::size_t size = bytes.size();
    for (std::size_t back = 1; back <= 3 && back <= size; ++back) {
        const auto first = static_cast<unsigned char>(bytes[size - back]);
        if (first >= 0x80 && first <= 0xBF)
            continue;
        const LeadByte lead = leadByte(first);
        if (back >= lead.length) // ASCII, an invalid byte, or a complete character
            return size;
        for (uint32_t i = 1; i < back; ++i)
            if (!continues(lead, i, static_cast<unsigned char>(bytes[size - back + i])))
                return size; // cannot be completed any more
        return size - back;
    }
    return size;
}

std::string Utf8Stream::push(std::string_view bytes)
{
    m_pending.append(bytes);
    const std::size_t complete = completeUtf8Length(m_pending);
    std::string out = m_pending.substr(0, complete);
    m_pending.erase(0, complete);
    return out;
}

std::string Utf8Stream::finish()
{
    return std::exchange(m_pending, {});
}

std::optional<std::size_t> findInvalidUtf8(std::string_view text)
{
    std::size_t pos = 0;
    while (pos < text.size()) {
        if (static_cast<unsigned char>(text[pos]) < 0x80) {
            ++pos;
            continue;
        }
        const Utf8Char c = decodeUtf8(text, pos);
        if (!c.valid)
            return pos;
        pos += c.length;
    }
    return std::nullopt;
}

void appendUtf8(std::string& out, char32_t cp)
{
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

std::string describeCodePoint(char32_t cp)
{
    char buffer[16];
    std::snprintf(buffer, sizeof buffer, "U+%04X", static_cast<unsigned>(cp));
    std::string text = buffer;
    // Printable characters are easier to recognise than their numbers.
    if (cp >= 0x20 && cp != 0x7F && !(cp >= 0x80 && cp < 0xA0)) {
        text += " '";
        appendUtf8(text, cp);
        text += "'";
    }
    return text;
}

} // namespace crowdtrain::core
