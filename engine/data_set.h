#pragma once

// A prepared data folder, as crowdtrain-prepare writes it and as llm.c and
// modded-nanogpt lay theirs out:
//   DIR/tokenizer/                  optional (llm.c folders have none)
//   DIR/<name>_train_000000.bin     every *.bin whose name contains "train"
//   DIR/<name>_val_000000.bin       every *.bin whose name contains "val"
// A name containing both is settled by whole words (split at anything but
// letters and digits): evaluation_train_000001.bin is a train shard;
// train_val.bin or trainval.bin is an error.
//   DIR/meta.json                   optional; written by crowdtrain-prepare
// Shards are opened (mapped) in sorted file-name order.
//
// A DataSet owns its shards; moving it keeps the shards' addresses, so
// ShardSlices into it stay valid. Immutable once opened.

#include "core/result.h"
#include "engine/batch_sampler.h"
#include "engine/token_shard.h"

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace crowdtrain::engine {

struct DataSet {
    std::filesystem::path dir;
    std::vector<TokenShard> train;
    std::vector<TokenShard> val;
    std::optional<std::filesystem::path> tokenizerDir; // DIR/tokenizer when present

    uint64_t trainTokens() const;
    uint64_t valTokens() const;
};

enum class ShardRole { None, Train, Val, Ambiguous };

// What openDataSet() takes a file of this name for.
ShardRole shardRoleOf(const std::string& fileName);

// Error if the folder is missing, has no train shard, a file name matches
// both "train" and "val", or any shard fails to open.
Result<DataSet> openDataSet(const std::filesystem::path& dir);

// One slice per shard covering all of it.
std::vector<ShardSlice> wholeShards(const std::vector<TokenShard>& shards);

} // namespace crowdtrain::engine
