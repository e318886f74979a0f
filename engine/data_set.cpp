#include "engine/data_set.h"

#include <algorithm>
#include <string>

namespace crowdtrain::engine {
namespace {

uint64_t totalTokens(const std::vector<TokenShard>& shards)
{
    uint64_t total = 0;
    for (const TokenShard& shard : shards)
        total += shard.size();
    return total;
}

Status openAll(const std::vector<std::filesystem::path>& files, std::vector<TokenShard>& into)
{
    for (const auto& file : files) {
        auto shard = TokenShard::open(file);
        if (!shard)
            return shard.error();
        into.push_back(std::move(*shard));
    }
    return Status::success();
}

} // namespace

uint64_t DataSet::trainTokens() const
{
    return totalTokens(train);
}

uint64_t DataSet::valTokens() const
{
    return totalTokens(val);
}

Result<DataSet> openDataSet(const std::filesystem::path& dir)
{
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec))
        return Error::make("not_found", dir.string() + ": no such data folder");
    std::vector<std::filesystem::path> trainFiles;
    std::vector<std::filesystem::path> valFiles;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
        const std::string name = entry.path().filename().string();
        if (!name.ends_with(".bin") || !entry.is_regular_file(ec))
            continue;
        const bool isTrain = name.find("train") != std::string::npos;
        const bool isVal = name.find("val") != std::string::npos;
        if (isTrain && isVal)
            return Error::make(
                "bad_data_set", entry.path().string() + ": the name says both train and val; rename it to say one");
        if (isTrain)
            trainFiles.push_back(entry.path());
        else if (isVal)
            valFiles.push_back(entry.path());
    }
    if (ec)
        return Error::make("io_error", dir.string() + ": cannot list: " + ec.message());
    if (trainFiles.empty())
        return Error::make("not_found", dir.string() + ": no train shards (*train*.bin)");
    std::sort(trainFiles.begin(), trainFiles.end());
    std::sort(valFiles.begin(), valFiles.end());

    DataSet dataSet;
    dataSet.dir = dir;
    if (Status status = openAll(trainFiles, dataSet.train); !status)
        return status.error();
    if (Status status = openAll(valFiles, dataSet.val); !status)
        return status.error();
    if (std::filesystem::is_directory(dir / "tokenizer", ec))
        dataSet.tokenizerDir = dir / "tokenizer";
    return dataSet;
}

std::vector<ShardSlice> wholeShards(const std::vector<TokenShard>& shards)
{
    std::vector<ShardSlice> slices;
    slices.reserve(shards.size());
    for (const TokenShard& shard : shards)
        slices.push_back({&shard, 0, shard.size()});
    return slices;
}

} // namespace crowdtrain::engine
