#pragma once

// Text <-> token ids. Two kinds: GPT-2's byte-level BPE ("gpt2-bpe", from
// encoder.json + vocab.bpe) and a character-level vocabulary ("char", from
// chars.json). A tokenizer folder holds the files of exactly one kind;
// loadTokenizer() reads it and save() writes it.
//
// Immutable after loading: encode/decode may run concurrently on one object.

#include "core/result.h"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace crowdtrain::engine {

class Tokenizer {
public:
    virtual ~Tokenizer() = default;

    // Never fails. GPT-2 BPE represents any bytes (invalid UTF-8 included).
    // The char tokenizer drops characters outside its vocabulary; use
    // tryEncode() to be told about them instead.
    virtual std::vector<int32_t> encode(std::string_view text) const = 0;

    // Like encode(), but text the vocabulary cannot represent exactly is an
    // error ("unknown_char" or "invalid_utf8") naming the character and its
    // byte offset.
    virtual Result<std::vector<int32_t>> tryEncode(std::string_view text) const = 0;

    // The bytes the ids stand for. An id outside [0, vocabSize()) becomes
    // U+FFFD. The result is raw bytes: ids cut from the middle of a GPT-2
    // sequence may end inside a UTF-8 character, so decoding token by token
    // and concatenating gives the same bytes as decoding all at once.
    virtual std::string decode(std::span<const int32_t> ids) const = 0;

    virtual int32_t vocabSize() const = 0;
    virtual std::string kind() const = 0; // "gpt2-bpe" or "char"
    virtual std::optional<int32_t> endOfText() const = 0; // 50256 for GPT-2

    // Writes the files loadTokenizer() reads into dir (created if missing),
    // each through a temporary name and a rename.
    virtual Status save(const std::filesystem::path& dir) const = 0;
};

// Reads a tokenizer folder: encoder.json + vocab.bpe, or chars.json.
Result<std::unique_ptr<Tokenizer>> loadTokenizer(const std::filesystem::path& dir);

// The UTF-8 bytes of U+FFFD, which decode() emits for unknown ids.
inline constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";

} // namespace crowdtrain::engine
