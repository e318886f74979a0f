#include "engine/char_tokenizer.h"

#include "core/file_io.h"
#include "core/utf8.h"
#include "engine/error_codes.h"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace crowdtrain::engine {
namespace {

constexpr char32_t kCodePointLimit = 0x110000;
// Token shards store ids as uint16.
constexpr std::size_t kMaxVocabulary = 65536;

Error badFile(const std::string& name, const std::string& what)
{
    return Error::make(errc::kBadFile, name + ": " + what);
}

} // namespace

CharTokenizer::CharTokenizer(std::vector<char32_t> sortedCodePoints)
    : m_codePoints(std::move(sortedCodePoints))
{
    m_asciiIds.fill(-1);
    for (std::size_t id = 0; id < m_codePoints.size() && m_codePoints[id] < 128; ++id)
        m_asciiIds[m_codePoints[id]] = static_cast<int32_t>(id);
}

Status collectCodePoints(std::string_view text, std::vector<bool>& seen, const std::string& name, uint64_t offset)
{
    seen.resize(kCodePointLimit, false);
    for (std::size_t pos = 0; pos < text.size();) {
        const core::Utf8Char c = core::decodeUtf8(text, pos);
        if (!c.valid)
            return Error::make(errc::kInvalidUtf8, name + ": not UTF-8 at byte offset " + std::to_string(offset + pos));
        seen[c.codePoint] = true;
        pos += c.length;
    }
    return Status::success();
}

Result<std::unique_ptr<CharTokenizer>> CharTokenizer::fromText(std::string_view corpus)
{
    std::vector<bool> seen;
    if (Status status = collectCodePoints(corpus, seen, "text"); !status)
        return status.error();
    std::vector<char32_t> codePoints;
    for (char32_t cp = 0; cp < kCodePointLimit; ++cp) {
        if (seen[cp])
            codePoints.push_back(cp);
    }
    return fromCodePoints(std::move(codePoints));
}

Result<std::unique_ptr<CharTokenizer>> CharTokenizer::fromCodePoints(std::vector<char32_t> codePoints)
{
    std::sort(codePoints.begin(), codePoints.end());
    codePoints.erase(std::unique(codePoints.begin(), codePoints.end()), codePoints.end());
    if (codePoints.empty())
        return Error::make(errc::kEmptyVocabulary, "a character vocabulary needs at least one character");
    if (codePoints.size() > kMaxVocabulary)
        return Error::make(errc::kVocabularyTooLarge,
            std::to_string(codePoints.size()) + " distinct characters; token shards hold at most 65536");
    for (const char32_t cp : codePoints) {
        if (cp >= kCodePointLimit || (cp >= 0xD800 && cp <= 0xDFFF))
            return Error::make(errc::kBadArgument, core::describeCodePoint(cp) + " is not a Unicode scalar value");
    }
    return std::unique_ptr<CharTokenizer>(new CharTokenizer(std::move(codePoints)));
}

Result<std::unique_ptr<CharTokenizer>> CharTokenizer::load(const std::filesystem::path& dir)
{
    const auto path = dir / kFile;
    auto content = core::readFile(path);
    if (!content)
        return content.error();
    return parse(*content, path.string());
}

Result<std::unique_ptr<CharTokenizer>> CharTokenizer::parse(std::string_view text, const std::string& name)
{
    nlohmann::json json;
    try {
        json = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
        return badFile(name, std::string("not valid JSON (truncated?): ") + e.what());
    }
    if (!json.is_object() || json.value("type", "") != "char")
        return badFile(name, "expected an object with \"type\": \"char\"");
    if (json.value("version", 0) != 1)
        return badFile(name, "unsupported version (expected 1)");
    const auto chars = json.find("chars");
    if (chars == json.end() || !chars->is_array())
        return badFile(name, "expected \"chars\": an array of one-character strings");
    std::vector<char32_t> codePoints;
    for (std::size_t i = 0; i < chars->size(); ++i) {
        const auto& entry = (*chars)[i];
        const std::string where = "chars[" + std::to_string(i) + "]";
        if (!entry.is_string())
            return badFile(name, where + " is not a string");
        const auto& s = entry.get_ref<const std::string&>();
        const core::Utf8Char c = s.empty() ? core::Utf8Char{} : core::decodeUtf8(s, 0);
        if (!c.valid || c.length != s.size())
            return badFile(name, where + " is not exactly one character");
        if (!codePoints.empty() && c.codePoint <= codePoints.back())
            return badFile(name, where + " is out of order or repeated (ids must follow code point order)");
        codePoints.push_back(c.codePoint);
    }
    auto tokenizer = fromCodePoints(std::move(codePoints));
    if (!tokenizer)
        return badFile(name, tokenizer.error().message);
    return tokenizer;
}

std::optional<int32_t> CharTokenizer::idOf(char32_t cp) const
{
    if (cp < 128) {
        const int32_t id = m_asciiIds[cp];
        return id >= 0 ? std::optional<int32_t>(id) : std::nullopt;
    }
    const auto it = std::lower_bound(m_codePoints.begin(), m_codePoints.end(), cp);
    if (it == m_codePoints.end() || *it != cp)
        return std::nullopt;
    return static_cast<int32_t>(it - m_codePoints.begin());
}

std::vector<int32_t> CharTokenizer::encode(std::string_view text) const
{
    std::vector<int32_t> ids;
    ids.reserve(text.size());
    for (std::size_t pos = 0; pos < text.size();) {
        const core::Utf8Char c = core::decodeUtf8(text, pos);
        pos += c.length;
        if (!c.valid)
            continue;
        if (const auto id = idOf(c.codePoint))
            ids.push_back(*id);
    }
    return ids;
}

Result<std::vector<int32_t>> CharTokenizer::tryEncode(std::string_view text) const
{
    std::vector<int32_t> ids;
    ids.reserve(text.size());
    for (std::size_t pos = 0; pos < text.size();) {
        const core::Utf8Char c = core::decodeUtf8(text, pos);
        if (!c.valid)
            return Error::make(errc::kInvalidUtf8, "not UTF-8 at byte offset " + std::to_string(pos));
        const auto id = idOf(c.codePoint);
        if (!id)
            return Error::make(errc::kUnknownChar,
                core::describeCodePoint(c.codePoint) + " at byte offset " + std::to_string(pos)
                    + " is not in the character vocabulary");
        ids.push_back(*id);
        pos += c.length;
    }
    return ids;
}

std::string CharTokenizer::decode(std::span<const int32_t> ids) const
{
    std::string text;
    text.reserve(ids.size());
    for (const int32_t id : ids) {
        if (id >= 0 && id < vocabSize())
            core::appendUtf8(text, m_codePoints[static_cast<std::size_t>(id)]);
        else
            text += kReplacementCharacter;
    }
    return text;
}

Status CharTokenizer::save(const std::filesystem::path& dir) const
{
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec)
        return Error::make(errc::kIoError, dir.string() + ": cannot create folder: " + ec.message());
    nlohmann::ordered_json json;
    json["type"] = "char";
    json["version"] = 1;
    auto& chars = json["chars"] = nlohmann::ordered_json::array();
    for (const char32_t cp : m_codePoints) {
        std::string s;
        core::appendUtf8(s, cp);
        chars.push_back(s);
    }
    return core::writeFileAtomic(dir / kFile, json.dump(1) + "\n");
}

} // namespace crowdtrain::engine
