#pragma once

// GPT-2's byte-level BPE, token for token what GPT-2's own encoder.py gives:
// the text is split by GPT-2's pattern (Gpt2PieceSplitter), each piece's
// UTF-8 bytes become one symbol per byte, and adjacent symbols are merged in
// the order of vocab.bpe's ranks. Any bytes encode, and decode(encode(x))
// gives x back. "<|endoftext|>" in the text is ordinary text, as in GPT-2.
//
// Immutable after loading; encode/decode may run concurrently. The per-piece
// BPE cache lives for one encode() call, so no locking is needed.

#include "engine/tokenizer.h"

#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace crowdtrain::engine {

class BpeTokenizer final : public Tokenizer {
public:
    static constexpr const char* kEncoderFile = "encoder.json";
    static constexpr const char* kMergesFile = "vocab.bpe";

    // Reads dir/encoder.json and dir/vocab.bpe.
    static Result<std::unique_ptr<BpeTokenizer>> load(const std::filesystem::path& dir);
    // Parses the two files' contents; the names are used in error messages.
    static Result<std::unique_ptr<BpeTokenizer>> parse(std::string_view encoderJson, std::string_view vocabBpe,
        const std::string& encoderName, const std::string& mergesName);

    std::vector<int32_t> encode(std::string_view text) const override;
    Result<std::vector<int32_t>> tryEncode(std::string_view text) const override;
    std::string decode(std::span<const int32_t> ids) const override;
    int32_t vocabSize() const override { return static_cast<int32_t>(m_tokenBytes.size()); }
    std::string kind() const override { return "gpt2-bpe"; }
    std::optional<int32_t> endOfText() const override { return m_endOfText; }
    Status save(const std::filesystem::path& dir) const override;

    int32_t mergeCount() const { return static_cast<int32_t>(m_mergeList.size()); }

private:
    struct Merge {
        int32_t rank;
        int32_t result;
    };

    // Open-addressing map from a (left, right) id pair to its merge: the
    // innermost lookup of BPE, so it avoids std::unordered_map's nodes.
    class MergeTable {
    public:
        void reserve(std::size_t count);
        void insert(int32_t left, int32_t right, Merge merge);
        const Merge* find(int32_t left, int32_t right) const;

    private:
        static uint64_t keyOf(int32_t left, int32_t right);
        std::size_t slotOf(uint64_t key) const;

        std::vector<uint64_t> m_keys;
        std::vector<Merge> m_values;
        int m_shift = 64;
    };

    BpeTokenizer() = default;

    void bpe(std::string_view piece, std::vector<int32_t>& out) const;
    void bpeShort(std::vector<int32_t>& symbols) const;
    void bpeLong(std::vector<int32_t>& symbols) const;

    std::vector<std::string> m_tokenBytes; // id -> the bytes it stands for
    std::array<int32_t, 256> m_byteToken{}; // byte -> its one-byte token
    std::vector<std::pair<int32_t, int32_t>> m_mergeList; // by rank
    MergeTable m_merges;
    std::optional<int32_t> m_endOfText;
};

} // namespace crowdtrain::engine
