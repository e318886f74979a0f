#pragma once

// Text corpus -> data folder (see data_set.h): the tokenizer, train and val
// shards and meta.json. The token stream is the files in order (GPT-2's
// <|endoftext|> between files when the tokenizer has one); the last
// valFraction of it is validation, the rest training, as in nanoGPT.
//
// Everything is written into a hidden staging folder next to the output and
// renamed into place at the end, so a failure leaves nothing behind.
// prepareDataSet() runs on the calling thread and shares no state.

#include "core/result.h"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace crowdtrain::engine {

struct PrepareOptions {
    std::vector<std::filesystem::path> inputs; // files, or folders (listCorpusFiles: text files, not hidden)
    std::filesystem::path outDir; // must not exist, or be empty
    std::string tokenizer = "gpt2"; // "gpt2" or "char"
    std::filesystem::path gpt2Dir; // encoder.json + vocab.bpe, for "gpt2"
    double valFraction = 0.1; // in [0, 1)
    uint64_t shardTokens = 100'000'000; // at most this many tokens per shard
    std::string name; // shard file prefix; empty: the first input's name
};

struct PrepareProgress {
    std::string stage; // "scanning" (char vocabulary), "tokenizing", "writing"
    uint64_t done = 0; // bytes read, or tokens written
    uint64_t total = 0;
};

struct PreparedShard {
    std::string file; // name inside outDir
    uint64_t tokens = 0;
};

struct PrepareSummary {
    std::string tokenizerKind;
    int32_t vocabSize = 0;
    std::size_t inputFiles = 0;
    uint64_t inputBytes = 0;
    uint64_t trainTokens = 0;
    uint64_t valTokens = 0;
    std::vector<PreparedShard> trainShards;
    std::vector<PreparedShard> valShards;
};

using PrepareProgressCallback = std::function<void(const PrepareProgress&)>;

Result<PrepareSummary> prepareDataSet(const PrepareOptions& options, const PrepareProgressCallback& progress = {});

} // namespace crowdtrain::engine
