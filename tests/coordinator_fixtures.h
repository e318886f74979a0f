#pragma once

// Shared by the coordinator-store tests: a real data folder (char tokenizer
// + llm.c token shards) and small file helpers.

#include "core/result.h"
#include "engine/char_tokenizer.h"
#include "engine/token_shard.h"

#include <QTest>

#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

namespace crowdtrain::testing {

// The value, or the test stops with the error's message.
template <typename T> T orFail(Result<T> result)
{
    if (!result.ok())
        qFatal("%s", result.error().message.c_str());
    return std::move(result).value();
}

inline std::string readAll(const std::filesystem::path& file)
{
    std::ifstream in(file, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void writeAll(const std::filesystem::path& file, std::string_view content)
{
    std::ofstream(file, std::ios::binary | std::ios::trunc) << content;
}

// DIR/tokenizer (a vocabulary of `vocab` characters), DIR/demo_train_00000N.bin
// with the given token counts, DIR/demo_val_000000.bin with valTokens.
inline void makeDataFolder(const std::filesystem::path& dir, int vocab, const std::vector<std::size_t>& trainTokens,
    std::size_t valTokens = 500)
{
    std::filesystem::create_directories(dir);
    std::vector<char32_t> codePoints;
    for (int i = 0; i < vocab; ++i)
        codePoints.push_back(char32_t(U'A' + i));
    auto tokenizer = engine::CharTokenizer::fromCodePoints(codePoints);
    if (!tokenizer || !(*tokenizer)->save(dir / "tokenizer").ok())
        qFatal("cannot write a tokenizer");
    auto shard = [&](const std::string& name, std::size_t count) {
        std::vector<uint16_t> tokens(count);
        for (std::size_t i = 0; i < count; ++i)
            tokens[i] = uint16_t(i % std::size_t(vocab));
        if (!engine::writeTokenShard(dir / name, tokens).ok())
            qFatal("cannot write a shard");
    };
    for (std::size_t i = 0; i < trainTokens.size(); ++i)
        shard("demo_train_00000" + std::to_string(i) + ".bin", trainTokens[i]);
    shard("demo_val_000000.bin", valTokens);
}

} // namespace crowdtrain::testing
