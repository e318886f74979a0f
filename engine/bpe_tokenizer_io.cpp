// Reading and writing GPT-2's vocabulary files: encoder.json (token -> id,
// tokens spelled in GPT-2's byte-to-unicode alphabet) and vocab.bpe (one
// merge per line, in rank order, after a "#version" line).
#include "engine/bpe_tokenizer.h"

#include "core/file_io.h"
#include "core/utf8.h"
#include "engine/error_codes.h"

#include <nlohmann/json.hpp>

#include <limits>
#include <unordered_map>

namespace crowdtrain::engine {
namespace {

constexpr const char* kEndOfText = "<|endoftext|>";

// GPT-2 spells every byte as a printable character so that BPE can work on
// strings: printable Latin-1 bytes stand for themselves, the other 68 bytes
// map to U+0100.. in byte order.
std::array<char32_t, 256> byteToUnicode()
{
    std::array<char32_t, 256> map{};
    char32_t next = 256;
    for (char32_t b = 0; b < 256; ++b) {
        const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        map[b] = printable ? b : next++;
    }
    return map;
}

std::string spell(std::string_view bytes, const std::array<char32_t, 256>& alphabet)
{
    std::string text;
    for (const char byte : bytes)
        core::appendUtf8(text, alphabet[static_cast<unsigned char>(byte)]);
    return text;
}

bool isSpecial(const std::string& token)
{
    return token.size() > 4 && token.starts_with("<|") && token.ends_with("|>");
}

Error badFile(const std::string& name, const std::string& what)
{
    return Error::make(errc::kBadFile, name + ": " + what);
}

} // namespace

Result<std::unique_ptr<BpeTokenizer>> BpeTokenizer::load(const std::filesystem::path& dir)
{
    const auto encoderPath = dir / kEncoderFile;
    const auto mergesPath = dir / kMergesFile;
    auto encoder = core::readFile(encoderPath);
    if (!encoder)
        return encoder.error();
    auto merges = core::readFile(mergesPath);
    if (!merges)
        return merges.error();
    return parse(*encoder, *merges, encoderPath.string(), mergesPath.string());
}

Result<std::unique_ptr<BpeTokenizer>> BpeTokenizer::parse(std::string_view encoderJson, std::string_view vocabBpe,
    const std::string& encoderName, const std::string& mergesName)
{
    const auto alphabet = byteToUnicode();
    std::unordered_map<char32_t, unsigned char> unicodeToByte;
    for (int b = 0; b < 256; ++b)
        unicodeToByte[alphabet[b]] = static_cast<unsigned char>(b);

    nlohmann::json json;
    try {
        json = nlohmann::json::parse(encoderJson);
    } catch (const nlohmann::json::exception& e) {
        return badFile(encoderName, std::string("not valid JSON (truncated?): ") + e.what());
    }
    if (!json.is_object() || json.empty())
        return badFile(encoderName, "expected a JSON object of token -> id");
    if (json.size() > static_cast<std::size_t>(std::numeric_limits<int32_t>::max()))
        return badFile(encoderName, "too many tokens");

    std::unique_ptr<BpeTokenizer> tokenizer(new BpeTokenizer());
    const std::size_t count = json.size();
    tokenizer->m_tokenBytes.resize(count);
    std::vector<bool> seen(count, false);
    std::unordered_map<std::string, int32_t> idOf;
    idOf.reserve(count);
    for (const auto& [token, value] : json.items()) {
        if (!value.is_number_integer())
            return badFile(encoderName, "the id of token '" + token + "' is not an integer");
        const auto id = value.get<int64_t>();
        if (id < 0 || static_cast<uint64_t>(id) >= count)
            return badFile(encoderName,
                "id " + std::to_string(id) + " of token '" + token + "' is outside 0.." + std::to_string(count - 1));
        if (seen[static_cast<std::size_t>(id)])
            return badFile(encoderName, "id " + std::to_string(id) + " is used twice");
        seen[static_cast<std::size_t>(id)] = true;
        std::string bytes;
        for (std::size_t pos = 0; pos < token.size();) {
            const core::Utf8Char c = core::decodeUtf8(token, pos);
            const auto it = unicodeToByte.find(c.codePoint);
            if (!c.valid || it == unicodeToByte.end())
                return badFile(encoderName,
                    "token '" + token + "' has " + core::describeCodePoint(c.codePoint)
                        + ", outside GPT-2's byte alphabet");
            bytes += static_cast<char>(it->second);
            pos += c.length;
        }
        tokenizer->m_tokenBytes[static_cast<std::size_t>(id)] = std::move(bytes);
        idOf.emplace(token, static_cast<int32_t>(id));
    }

    std::vector<bool> reachable(count, false);
    for (int b = 0; b < 256; ++b) {
        std::string token;
        core::appendUtf8(token, alphabet[b]);
        const auto it = idOf.find(token);
        if (it == idOf.end())
            return badFile(encoderName, "lacks the one-byte token for byte " + std::to_string(b));
        tokenizer->m_byteToken[b] = it->second;
        reachable[static_cast<std::size_t>(it->second)] = true;
    }

    std::size_t lineNumber = 0;
    std::size_t lineStart = 0;
    tokenizer->m_merges.reserve(count);
    while (lineStart < vocabBpe.size()) {
        std::size_t lineEnd = vocabBpe.find('\n', lineStart);
        if (lineEnd == std::string_view::npos)
            lineEnd = vocabBpe.size();
        std::string_view line = vocabBpe.substr(lineStart, lineEnd - lineStart);
        lineStart = lineEnd + 1;
        ++lineNumber;
        if (!line.empty() && line.back() == '\r')
            line.remove_suffix(1);
        if (line.empty() || (lineNumber == 1 && line.starts_with("#")))
            continue;
        const std::size_t space = line.find(' ');
        const std::string_view left = line.substr(0, space);
        const std::string_view right = space == std::string_view::npos ? std::string_view() : line.substr(space + 1);
        const std::string where = mergesName + ":" + std::to_string(lineNumber);
        if (left.empty() || right.empty() || right.find(' ') != std::string_view::npos)
            return Error::make(errc::kBadFile, where + ": expected two tokens separated by one space");
        const auto leftId = idOf.find(std::string(left));
        const auto rightId = idOf.find(std::string(right));
        const auto resultId = idOf.find(std::string(left) + std::string(right));
        if (leftId == idOf.end() || rightId == idOf.end() || resultId == idOf.end())
            return Error::make(errc::kBadFile,
                where + ": merge '" + std::string(line) + "' uses or makes a token that " + encoderName + " lacks");
        const auto rank = static_cast<int32_t>(tokenizer->m_mergeList.size());
        // A repeated pair takes its last rank, as in GPT-2's dict(zip(...)).
        tokenizer->m_merges.insert(leftId->second, rightId->second, Merge{rank, resultId->second});
        tokenizer->m_mergeList.emplace_back(leftId->second, rightId->second);
        reachable[static_cast<std::size_t>(resultId->second)] = true;
    }

    // A token no merge can make means the merges were cut short or belong to
    // another vocabulary; GPT-2 would silently never emit it.
    for (const auto& [token, id] : idOf) {
        if (reachable[static_cast<std::size_t>(id)] || isSpecial(token))
            continue;
        return Error::make(errc::kBadFile,
            mergesName + ": no merge makes token '" + token + "' (id " + std::to_string(id) + ") of " + encoderName
                + "; the file is truncated or does not belong with it");
    }
    if (const auto it = idOf.find(kEndOfText); it != idOf.end())
        tokenizer->m_endOfText = it->second;
    return tokenizer;
}

Status BpeTokenizer::save(const std::filesystem::path& dir) const
{
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec)
        return Error::make(errc::kIoError, dir.string() + ": cannot create folder: " + ec.message());
    const auto alphabet = byteToUnicode();
    // Written by hand in id order: ordered_json looks keys up linearly,
    // which is quadratic over 50k tokens.
    std::string encoder = "{";
    for (std::size_t id = 0; id < m_tokenBytes.size(); ++id) {
        encoder += id ? ", " : "";
        encoder += nlohmann::json(spell(m_tokenBytes[id], alphabet)).dump();
        encoder += ": " + std::to_string(id);
    }
    encoder += "}";
    std::string merges = "#version: 0.2\n";
    for (const auto& [left, right] : m_mergeList) {
        merges += spell(m_tokenBytes[static_cast<std::size_t>(left)], alphabet);
        merges += ' ';
        merges += spell(m_tokenBytes[static_cast<std::size_t>(right)], alphabet);
        merges += '\n';
    }
    if (Status status = core::writeFileAtomic(dir / kEncoderFile, encoder); !status)
        return status;
    return core::writeFileAtomic(dir / kMergesFile, merges);
}

} // namespace crowdtrain::engine
