// Value::toJson(): compact JSON for the CLI's --json output and logs.
#include "net/control/value.h"

#include "net/control/utf8_text.h"

#include <charconv>
#include <cmath>

namespace crowdtrain::control {

namespace {

void appendJsonString(std::string& out, std::string_view text)
{
    static constexpr char kHex[] = "0123456789abcdef";
    out += '"';
    // Valid UTF-8 passes through; only ASCII needs escaping.
    for (const char byte : toValidUtf8(text)) {
        const auto c = static_cast<unsigned char>(byte);
        switch (c) {
        case '"':
            out += "\\\"";
            break;
        case '\\':
            out += "\\\\";
            break;
        case '\n':
            out += "\\n";
            break;
        case '\r':
            out += "\\r";
            break;
        case '\t':
            out += "\\t";
            break;
        case '\b':
            out += "\\b";
            break;
        case '\f':
            out += "\\f";
            break;
        default:
            if (c < 0x20) {
                out += "\\u00";
                out += kHex[c >> 4];
                out += kHex[c & 0xF];
            } else {
                out += static_cast<char>(c);
            }
        }
    }
    out += '"';
}

std::string base64(std::string_view bytes)
{
    static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    out.reserve((bytes.size() + 2) / 3 * 4);
    for (std::size_t i = 0; i < bytes.size(); i += 3) {
        const std::size_t left = bytes.size() - i;
        uint32_t group = static_cast<uint32_t>(static_cast<unsigned char>(bytes[i])) << 16;
        if (left > 1)
            group |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8;
        if (left > 2)
            group |= static_cast<unsigned char>(bytes[i + 2]);
        out += kAlphabet[(group >> 18) & 0x3F];
        out += kAlphabet[(group >> 12) & 0x3F];
        out += left > 1 ? kAlphabet[(group >> 6) & 0x3F] : '=';
        out += left > 2 ? kAlphabet[group & 0x3F] : '=';
    }
    return out;
}

template <typename Number> void appendNumber(std::string& out, Number number)
{
    char buffer[32];
    const auto result = std::to_chars(buffer, buffer + sizeof buffer, number);
    out.append(buffer, result.ptr);
}

void appendJson(std::string& out, const Value& value)
{
    switch (value.kind()) {
    case Value::Kind::Nil:
        out += "null";
        break;
    case Value::Kind::Bool:
        out += value.toBool() ? "true" : "false";
        break;
    case Value::Kind::Int:
        appendNumber(out, value.toInt());
        break;
    case Value::Kind::UInt:
        appendNumber(out, value.toUInt());
        break;
    case Value::Kind::Double:
        // Shortest text that reads back as the same double.
        if (std::isfinite(value.toDouble()))
            appendNumber(out, value.toDouble());
        else
            out += "null";
        break;
    case Value::Kind::String:
        appendJsonString(out, value.toString());
        break;
    case Value::Kind::Binary:
        out += '"';
        out += base64(value.toBinary());
        out += '"';
        break;
    case Value::Kind::Array: {
        out += '[';
        bool first = true;
        for (const Value& item : value.items()) {
            if (!first)
                out += ',';
            first = false;
            appendJson(out, item);
        }
        out += ']';
        break;
    }
    case Value::Kind::Map: {
        out += '{';
        bool first = true;
        for (const auto& [key, item] : value.entries()) {
            if (!first)
                out += ',';
            first = false;
            appendJsonString(out, key);
            out += ':';
            appendJson(out, item);
        }
        out += '}';
        break;
    }
    }
}

} // namespace

std::string Value::toJson() const
{
    std::string out;
    appendJson(out, *this);
    return out;
}

} // namespace crowdtrain::control
