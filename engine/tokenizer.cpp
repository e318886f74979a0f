#include "engine/tokenizer.h"

#include "engine/bpe_tokenizer.h"
#include "engine/char_tokenizer.h"
#include "engine/error_codes.h"

namespace crowdtrain::engine {

Result<std::unique_ptr<Tokenizer>> loadTokenizer(const std::filesystem::path& dir)
{
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec))
        return Error::make(errc::kNotFound, dir.string() + ": no such tokenizer folder");
    const bool hasChars = std::filesystem::exists(dir / CharTokenizer::kFile, ec);
    const bool hasEncoder = std::filesystem::exists(dir / BpeTokenizer::kEncoderFile, ec);
    const bool hasMerges = std::filesystem::exists(dir / BpeTokenizer::kMergesFile, ec);
    if (hasChars && (hasEncoder || hasMerges))
        return Error::make(errc::kBadTokenizer,
            dir.string() + ": holds both chars.json and GPT-2 files; a tokenizer folder holds one kind");
    if (hasChars) {
        auto tokenizer = CharTokenizer::load(dir);
        if (!tokenizer)
            return tokenizer.error();
        return std::unique_ptr<Tokenizer>(std::move(*tokenizer));
    }
    if (hasEncoder || hasMerges) {
        // load() names whichever of the two is missing.
        auto tokenizer = BpeTokenizer::load(dir);
        if (!tokenizer)
            return tokenizer.error();
        return std::unique_ptr<Tokenizer>(std::move(*tokenizer));
    }
    return Error::make(
        errc::kNotFound, dir.string() + ": no tokenizer here (expected encoder.json + vocab.bpe, or chars.json)");
}

} // namespace crowdtrain::engine
