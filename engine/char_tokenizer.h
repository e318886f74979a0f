#pragma once

// A character-level vocabulary, as in nanoGPT's shakespeare_char: the sorted
// unique Unicode code points of a corpus, id = position (65 symbols for Tiny
// Shakespeare). Saved as chars.json:
//   {"type": "char", "version": 1, "chars": ["\n", " ", "!", ...]}
// where each entry is one code point, in increasing order.
//
// encode() drops characters outside the vocabulary (and bytes that are not
// UTF-8); tryEncode() reports the first one instead. Immutable after
// construction; encode/decode may run concurrently.

#include "engine/tokenizer.h"

#include <array>
#include <filesystem>
#include <vector>

namespace crowdtrain::engine {

class CharTokenizer final : public Tokenizer {
public:
    static constexpr const char* kFile = "chars.json";

    // The vocabulary of a corpus; invalid UTF-8 is an error naming the offset.
    static Result<std::unique_ptr<CharTokenizer>> fromText(std::string_view corpus);
    // From code points in any order, duplicates allowed.
    static Result<std::unique_ptr<CharTokenizer>> fromCodePoints(std::vector<char32_t> codePoints);
    // Reads dir/chars.json.
    static Result<std::unique_ptr<CharTokenizer>> load(const std::filesystem::path& dir);
    static Result<std::unique_ptr<CharTokenizer>> parse(std::string_view json, const std::string& name);

    std::vector<int32_t> encode(std::string_view text) const override;
    Result<std::vector<int32_t>> tryEncode(std::string_view text) const override;
    std::string decode(std::span<const int32_t> ids) const override;
    int32_t vocabSize() const override { return static_cast<int32_t>(m_codePoints.size()); }
    std::string kind() const override { return "char"; }
    std::optional<int32_t> endOfText() const override { return std::nullopt; }
    Status save(const std::filesystem::path& dir) const override;

    const std::vector<char32_t>& codePoints() const { return m_codePoints; }

private:
    explicit CharTokenizer(std::vector<char32_t> sortedCodePoints);
    std::optional<int32_t> idOf(char32_t codePoint) const;

    std::vector<char32_t> m_codePoints; // id -> code point, increasing
    std::array<int32_t, 128> m_asciiIds{}; // -1 where ASCII is not in the vocabulary
};

// Marks the code points of `text` in `seen` (indexed by code point, sized
// 0x110000): a corpus can be scanned chunk by chunk before the vocabulary is
// built. Invalid UTF-8 is an error naming `name` and the byte offset, counted
// from `offset`, where the text starts in its file.
Status collectCodePoints(std::string_view text, std::vector<bool>& seen, const std::string& name, uint64_t offset = 0);

} // namespace crowdtrain::engine
