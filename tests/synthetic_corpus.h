#pragma once

// "Some text" for the suites that need a corpus but not a particular one:
// a seeded, made-up play with a known structure, the same bytes for the
// same seed on every machine. A few speakers (upper-case names) each say
// one to three sentences; a sentence is 4 to 12 words drawn from a made-up
// lexicon where each word has a few likely successors (so a model has
// something to learn: its loss falls within tens of steps), with commas,
// semicolons, dashes and apostrophes inside and '.', '!' or '?' at the end.
// Its characters are Tiny Shakespeare's 65 (newline, space,
// !$&',-.3:;? and the letters), each at least once, so a character
// tokenizer of it has 65 tokens and the suites' specs (vocab_size 65)
// fit. Nothing here is copied from an outside corpus.

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace crowdtrain::testing {

// The characters a synthetic corpus uses, all of them.
inline const std::string kSyntheticAlphabet = "\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

class SyntheticCorpus {
public:
    explicit SyntheticCorpus(uint64_t seed)
        : m_state(seed)
    {
        const char* consonants = "bcdfghjklmnprstvwz";
        const char* vowels = "aeiouy";
        for (int i = 0; i < 300; ++i) {
            std::string word;
            const int syllables = 1 + int(next() % 3);
            for (int s = 0; s < syllables; ++s) {
                word += consonants[next() % 18];
                word += vowels[next() % 6];
            }
            if (next() % 4 == 0)
                word += consonants[next() % 18];
            m_words.push_back(word);
        }
        // Each word's likely successors: the structure a model learns.
        for (std::size_t i = 0; i < m_words.size(); ++i) {
            std::vector<std::size_t> after;
            for (int k = 0; k < 4; ++k)
                after.push_back(std::size_t(next() % m_words.size()));
            m_after.push_back(after);
        }
        for (int i = 0; i < 12; ++i) {
            std::string name;
            for (int s = 0; s < 2 + int(next() % 2); ++s) {
                name += char('A' + next() % 26);
                name += "AEIOU"[next() % 5];
            }
            m_speakers.push_back(name);
        }
    }

    // At least `bytes` bytes of text (whole speeches), ending with a line
    // that holds every character of kSyntheticAlphabet.
    std::string text(std::size_t bytes)
    {
        std::string out;
        out.reserve(bytes + 4096);
        while (out.size() < bytes)
            speech(out);
        out += "ABCDEFGHIJKLMNOPQRSTUVWXYZ abcdefghijklmnopqrstuvwxyz !$&',-.3:;?\n";
        return out;
    }

private:
    uint64_t next()
    {
        // splitmix64: the same sequence everywhere.
        uint64_t z = (m_state += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        return z ^ (z >> 31);
    }

    void speech(std::string& out)
    {
        out += m_speakers[next() % m_speakers.size()];
        out += ":\n";
        const int sentences = 1 + int(next() % 3);
        for (int s = 0; s < sentences; ++s) {
            if (s > 0)
                out += ' ';
            sentence(out);
        }
        out += "\n\n";
    }

    void sentence(std::string& out)
    {
        std::size_t word = std::size_t(next() % m_words.size());
        const int words = 4 + int(next() % 9);
        for (int w = 0; w < words; ++w) {
            std::string shown = m_words[word];
            if (w == 0)
                shown[0] = char(shown[0] - 'a' + 'A');
            out += shown;
            if (w + 1 < words) {
                const uint64_t mark = next() % 40;
                out += mark == 0 ? "," : mark == 1 ? ";" : mark == 2 ? " -" : mark == 3 ? "'s" : "";
                out += ' ';
            }
            // Mostly a likely successor, now and then any word.
            word = next() % 8 == 0 ? std::size_t(next() % m_words.size()) : m_after[word][next() % 4];
        }
        out += ".!?"[next() % 3];
    }

    uint64_t m_state;
    std::vector<std::string> m_words;
    std::vector<std::vector<std::size_t>> m_after;
    std::vector<std::string> m_speakers;
};

// `bytes` of synthetic text (seed 1 unless said) written to `file`.
inline std::filesystem::path writeSyntheticCorpus(
    const std::filesystem::path& file, std::size_t bytes, uint64_t seed = 1)
{
    std::filesystem::create_directories(file.parent_path());
    std::ofstream(file, std::ios::binary) << SyntheticCorpus(seed).text(bytes);
    return file;
}

} // namespace crowdtrain::testing
