#include "engine/gpt2_pretokenizer.h"

#include "core/utf8.h"
#include "engine/unicode_classes.h"

namespace crowdtrain::engine {
namespace {

struct Classified {
    CharClass charClass;
    std::size_t length;
};

inline Classified classify(std::string_view text, std::size_t pos)
{
    const auto byte = static_cast<unsigned char>(text[pos]);
    if (byte < 0x80)
        return {detail::kAsciiClasses[byte], 1};
    const core::Utf8Char c = core::decodeUtf8(text, pos);
    return {c.valid ? charClass(c.codePoint) : CharClass::Other, c.length};
}

} // namespace

std::size_t Gpt2PieceSplitter::contractionLength(std::size_t pos) const
{
    // The pattern's contractions are case-sensitive and use the ASCII
    // apostrophe only, so "'S" and "’s" are not contractions.
    const std::string_view rest = m_text.substr(pos + 1);
    if (rest.empty())
        return 0;
    const char first = rest[0];
    if (first == 's' || first == 't' || first == 'm' || first == 'd')
        return 2;
    if (rest.size() >= 2 && (rest.starts_with("re") || rest.starts_with("ve") || rest.starts_with("ll")))
        return 3;
    return 0;
}

std::optional<std::string_view> Gpt2PieceSplitter::next()
{
    const std::size_t size = m_text.size();
    if (m_pos >= size)
        return std::nullopt;
    const std::size_t start = m_pos;

    if (m_text[start] == '\'') {
        if (const std::size_t length = contractionLength(start)) {
            m_pos += length;
            return m_text.substr(start, length);
        }
    }

    Classified head = classify(m_text, start);
    std::size_t runStart = start;
    // " ?X+": one leading ASCII space joins a following letter, number or
    // other run; before white space it belongs to the white-space run.
    if (m_text[start] == ' ' && start + 1 < size) {
        const Classified after = classify(m_text, start + 1);
        if (after.charClass != CharClass::Space) {
            head = after;
            runStart = start + 1;
        }
    }

    if (head.charClass != CharClass::Space) {
        std::size_t end = runStart + head.length;
        while (end < size) {
            const Classified c = classify(m_text, end);
            if (c.charClass != head.charClass)
                break;
            end += c.length;
        }
        m_pos = end;
        return m_text.substr(start, end - start);
    }

    // "\s+(?!\S)|\s+": a white-space run that ends the text is one piece.
    // Otherwise backtracking leaves its last character to start the next
    // piece (so " word" keeps its space), unless the run is one character.
    std::size_t end = start;
    std::size_t lastStart = start;
    std::size_t count = 0;
    while (end < size) {
        const Classified c = classify(m_text, end);
        if (c.charClass != CharClass::Space)
            break;
        lastStart = end;
        end += c.length;
        ++count;
    }
    m_pos = (end == size || count == 1) ? end : lastStart;
    return m_text.substr(start, m_pos - start);
}

bool isSafeSplitPoint(std::string_view text, std::size_t pos)
{
    if (pos == 0 || pos >= text.size())
        return pos == 0 || pos == text.size();
    const auto before = static_cast<unsigned char>(text[pos - 1]);
    const auto after = static_cast<unsigned char>(text[pos]);
    return before > 0x20 && before < 0x7F && after < 0x80 && detail::kAsciiClasses[after] == CharClass::Space;
}

} // namespace crowdtrain::engine
