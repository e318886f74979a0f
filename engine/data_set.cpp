#include "engine/data_set.h"

#include "engine/error_codes.h"

#include <algorithm>
#include <cctype>
#include <initializer_list>
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

bool hasWord(const std::string& name, std::initializer_list<std::string_view> words)
{
    std::size_t start = 0;
    while (start < name.size()) {
        std::size_t end = start;
        while (end < name.size() && std::isalnum(static_cast<unsigned char>(name[end])))
            ++end;
        const std::string_view word = std::string_view(name).substr(start, end - start);
        for (const std::string_view candidate : words) {
            if (word == candidate)
                return true;
        }
        start = end + 1;
    }
    return false;
}

} // namespace

ShardRole shardRoleOf(const std::string& fileName)
{
    if (!fileName.ends_with(".bin"))
        return ShardRole::None;
    const std::string stem = fileName.substr(0, fileName.size() - 4);
    const bool train = stem.find("train") != std::string::npos;
    const bool val = stem.find("val") != std::string::npos;
    if (train != val)
        return train ? ShardRole::Train : ShardRole::Val;
    if (!train)
        return ShardRole::None;
    // Both substrings: "evaluation_train" has the word train only.
    const bool trainWord = hasWord(stem, {"train"});
    const bool valWord = hasWord(stem, {"val", "valid", "validation"});
    if (trainWord != valWord)
        return trainWord ? ShardRole::Train : ShardRole::Val;
    return ShardRole::Ambiguous;
}

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
        return Error::make(errc::kNotFound, dir.string() + ": no such data folder");
    std::vector<std::filesystem::path> trainFiles;
    std::vector<std::filesystem::path> valFiles;
    std::filesystem::directory_iterator it(dir, ec);
    for (; !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
        const std::filesystem::directory_entry& entry = *it;
        const std::string name = entry.path().filename().string();
        const ShardRole role = shardRoleOf(name);
        if (role == ShardRole::None || !entry.is_regular_file(ec))
            continue;
        if (role == ShardRole::Ambiguous)
            return Error::make(
                errc::kBadDataSet, entry.path().string() + ": the name says both train and val; rename it to say one");
        (role == ShardRole::Train ? trainFiles : valFiles).push_back(entry.path());
    }
    if (ec)
        return Error::make(errc::kIoError, dir.string() + ": cannot list: " + ec.message());
    if (trainFiles.empty())
        return Error::make(errc::kNotFound, dir.string() + ": no train shards (*train*.bin)");
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
