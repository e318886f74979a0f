#pragma once

// UTF-8, one rule for every layer: strict decoding (no overlong forms, no
// surrogates, nothing above U+10FFFF, RFC 3629), validation, encoding and
// cutting a byte stream at character boundaries. The tokenizers, the wire's
// text checks and the control API all use these. Pure functions; thread-safe
// (a Utf8Stream is used by one thread).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace crowdtrain::core {

struct Utf8Char {
    char32_t codePoint = 0; // the byte's value when !valid
    uint32_t length = 1; // bytes consumed; 1 for an invalid byte
    bool valid = false;
};

// Decodes the character starting at text[pos] (pos < text.size()). An invalid
// or truncated sequence yields its first byte alone, marked invalid.
Utf8Char decodeUtf8(std::string_view text, std::size_t pos);

// Byte offset of the first byte that does not belong to valid UTF-8.
std::optional<std::size_t> findInvalidUtf8(std::string_view text);

inline bool isValidUtf8(std::string_view text)
{
    return !findInvalidUtf8(text);
}

// Appends the UTF-8 form of a code point (which must be a Unicode scalar value).
void appendUtf8(std::string& out, char32_t codePoint);

// "U+00E9 'é'" style description for error messages.
std::string describeCodePoint(char32_t codePoint);

// Length of `bytes` without a trailing incomplete character: a valid lead byte
// followed by fewer continuation bytes than it needs, each in its allowed
// range, so that more bytes could still complete it. Everything else counts
// as complete, invalid bytes included.
std::size_t completeUtf8Length(std::string_view bytes);

// Cuts a byte stream (a model's tokens decoded one at a time) into pieces that
// never end inside a UTF-8 character, for consumers that decode each piece on
// its own (a terminal, a QString). Invalid bytes are passed on as they are, so
// the pieces joined give exactly the bytes pushed.
class Utf8Stream {
public:
    // The bytes held back before plus `bytes`, up to the last complete character.
    std::string push(std::string_view bytes);
    // What is still held back (an incomplete character at the end of the stream).
    std::string finish();

private:
    std::string m_pending;
};

} // namespace crowdtrain::core
