#pragma once

// Splits text into the pieces GPT-2 runs BPE on, exactly as GPT-2's pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// does under Python's `regex` module, hand-written over UTF-8 because
// std::regex is far too slow and has no \p{...}. Bytes that are not valid
// UTF-8 count as one "other" character each, so every input splits and
// the pieces always concatenate back to the input.
//
// A splitter reads a string_view it does not own; each object is used by
// one thread at a time.

#include <cstddef>
#include <optional>
#include <string_view>

namespace crowdtrain::engine {

class Gpt2PieceSplitter {
public:
    explicit Gpt2PieceSplitter(std::string_view text)
        : m_text(text)
    { }

    // The next piece (a view into the text), or nullopt at the end.
    std::optional<std::string_view> next();

private:
    std::size_t contractionLength(std::size_t pos) const;

    std::string_view m_text;
    std::size_t m_pos = 0;
};

// True when text may be cut between text[pos - 1] and text[pos] without
// changing how either side splits: a piece never continues from a
// non-space character into white space, and matching never looks behind.
// Conservative: only an ASCII non-space byte followed by an ASCII space
// character qualifies.
bool isSafeSplitPoint(std::string_view text, std::size_t pos);

} // namespace crowdtrain::engine
