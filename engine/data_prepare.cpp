#include "engine/data_prepare.h"

#include "core/file_io.h"
#include "engine/bpe_tokenizer.h"
#include "engine/char_tokenizer.h"
#include "engine/corpus.h"
#include "engine/data_set.h"
#include "engine/error_codes.h"
#include "engine/token_shard.h"

#include "crowdtrain/version.h"

#include <nlohmann/json.hpp>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <unistd.h>

namespace crowdtrain::engine {
namespace {

constexpr std::size_t kChunkBytes = 4 << 20;
constexpr std::size_t kCopyTokens = 1 << 20;
constexpr const char* kStreamFile = "tokens.stream";

// The hidden folder everything is written into. Dropped uncommitted, it
// removes itself and any parent folders it had to create.
class StagingFolder {
public:
    static Result<StagingFolder> create(const std::filesystem::path& out)
    {
        std::error_code ec;
        if (std::filesystem::exists(out, ec)) {
            if (!std::filesystem::is_directory(out, ec))
                return Error::make(errc::kBadOutput, out.string() + ": exists and is not a folder");
            if (!std::filesystem::is_empty(out, ec))
                return Error::make(errc::kBadOutput, out.string() + ": exists and is not empty; choose a new folder");
        }
        StagingFolder staging;
        staging.m_out = out;
        for (auto parent = out.parent_path(); !parent.empty() && !std::filesystem::exists(parent, ec);
             parent = parent.parent_path())
            staging.m_createdParent = parent;
        staging.m_path = out.parent_path() / ("." + out.filename().string() + ".partial-" + std::to_string(::getpid()));
        std::filesystem::create_directories(staging.m_path, ec);
        if (ec)
            return Error::make(errc::kIoError, out.string() + ": cannot create the output folder: " + ec.message());
        staging.m_active = true;
        return staging;
    }

    StagingFolder(StagingFolder&& other) noexcept
        : m_out(std::move(other.m_out))
        , m_path(std::move(other.m_path))
        , m_createdParent(std::move(other.m_createdParent))
        , m_active(std::exchange(other.m_active, false))
    { }
    StagingFolder& operator=(StagingFolder&&) = delete;

    ~StagingFolder()
    {
        if (!m_active)
            return;
        std::error_code ec;
        std::filesystem::remove_all(m_path, ec);
        if (!m_createdParent.empty())
            std::filesystem::remove_all(m_createdParent, ec);
    }

    const std::filesystem::path& path() const { return m_path; }

    Status commit()
    {
        std::error_code ec;
        if (std::filesystem::exists(m_out, ec))
            std::filesystem::remove(m_out, ec); // empty, checked in create()
        std::filesystem::rename(m_path, m_out, ec);
        if (ec)
            return Error::make(
                errc::kIoError, m_out.string() + ": cannot move the finished folder into place: " + ec.message());
        m_active = false;
        return Status::success();
    }

private:
    StagingFolder() = default;

    std::filesystem::path m_out;
    std::filesystem::path m_path;
    std::filesystem::path m_createdParent;
    bool m_active = false;
};

std::string sanitizedName(std::string name)
{
    for (char& c : name) {
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.')
            c = '_';
    }
    return name.empty() ? std::string("data") : name;
}

std::string shardName(const std::string& prefix, const char* role, std::size_t index)
{
    char number[16];
    std::snprintf(number, sizeof number, "%06zu", index);
    return prefix + "_" + role + "_" + number + ".bin";
}

Status validate(const PrepareOptions& options)
{
    if (options.inputs.empty())
        return Error::make(errc::kBadArgument, "no input files or folders");
    if (options.outDir.empty())
        return Error::make(errc::kBadArgument, "no output folder");
    if (!(options.valFraction >= 0.0 && options.valFraction < 1.0))
        return Error::make(errc::kBadArgument, "the validation fraction must be in [0, 1)");
    if (options.shardTokens < 1 || options.shardTokens > kMaxShardTokens)
        return Error::make(errc::kBadArgument, "tokens per shard must be in 1.." + std::to_string(kMaxShardTokens));
    if (options.tokenizer != "gpt2" && options.tokenizer != "char")
        return Error::make(errc::kBadArgument, "unknown tokenizer '" + options.tokenizer + "' (known: gpt2, char)");
    if (options.tokenizer == "gpt2" && options.gpt2Dir.empty())
        return Error::make(errc::kBadArgument, "the gpt2 tokenizer needs the folder with encoder.json and vocab.bpe");
    return Status::success();
}

Result<std::unique_ptr<Tokenizer>> makeTokenizer(const PrepareOptions& options,
    const std::vector<std::filesystem::path>& files, uint64_t totalBytes, const PrepareProgressCallback& progress)
{
    if (options.tokenizer == "gpt2") {
        auto bpe = BpeTokenizer::load(options.gpt2Dir);
        if (!bpe)
            return bpe.error();
        return std::unique_ptr<Tokenizer>(std::move(*bpe));
    }
    std::vector<bool> seen;
    uint64_t done = 0;
    for (const auto& file : files) {
        uint64_t offset = 0;
        const Status status = forEachChunk(file, kChunkBytes, [&](std::string_view chunk) {
            if (Status s = collectCodePoints(chunk, seen, file.string(), offset); !s)
                return s;
            offset += chunk.size();
            done += chunk.size();
            if (progress)
                progress({"scanning", done, totalBytes});
            return Status::success();
        });
        if (!status)
            return status.error();
    }
    std::vector<char32_t> codePoints;
    for (char32_t cp = 0; cp < seen.size(); ++cp) {
        if (seen[cp])
            codePoints.push_back(cp);
    }
    auto chars = CharTokenizer::fromCodePoints(std::move(codePoints));
    if (!chars)
        return chars.error();
    return std::unique_ptr<Tokenizer>(std::move(*chars));
}

// Writes the whole token stream as raw uint16 and returns its length.
Result<uint64_t> tokenize(const Tokenizer& tokenizer, const std::vector<std::filesystem::path>& files,
    const std::filesystem::path& stream, uint64_t totalBytes, const PrepareProgressCallback& progress)
{
    std::ofstream out(stream, std::ios::binary);
    if (!out)
        return core::ioError("cannot create", stream, errno);
    uint64_t count = 0;
    uint64_t done = 0;
    std::vector<uint16_t> buffer;
    const auto emit = [&](const std::vector<int32_t>& ids) {
        buffer.assign(ids.begin(), ids.end()); // ids < vocabSize <= 65536, checked by the caller
        out.write(reinterpret_cast<const char*>(buffer.data()), static_cast<std::streamsize>(buffer.size() * 2));
        count += ids.size();
    };
    for (std::size_t i = 0; i < files.size(); ++i) {
        if (i > 0 && tokenizer.endOfText())
            emit({*tokenizer.endOfText()});
        uint64_t offset = 0;
        const Status status = forEachChunk(files[i], kChunkBytes, [&](std::string_view chunk) -> Status {
            auto ids = tokenizer.tryEncode(chunk);
            if (!ids)
                return Error::make(ids.error().code,
                    files[i].string() + ": " + ids.error().message
                        + (offset ? " (in the chunk at byte " + std::to_string(offset) + ")" : ""));
            emit(*ids);
            if (!out)
                return core::ioError("cannot write", stream, errno);
            offset += chunk.size();
            done += chunk.size();
            if (progress)
                progress({"tokenizing", done, totalBytes});
            return Status::success();
        });
        if (!status)
            return status.error();
    }
    out.close();
    if (!out)
        return core::ioError("cannot write", stream, errno);
    return count;
}

// Copies the next `count` tokens of the stream into shards of at most
// shardTokens each.
Result<std::vector<PreparedShard>> writeShards(std::ifstream& stream, uint64_t count, const std::filesystem::path& dir,
    const std::string& prefix, const char* role, uint64_t shardTokens, const std::function<void(uint64_t)>& advanced)
{
    std::vector<PreparedShard> shards;
    std::vector<uint16_t> buffer;
    for (uint64_t written = 0; written < count;) {
        PreparedShard shard{shardName(prefix, role, shards.size()), std::min(shardTokens, count - written)};
        auto writer = TokenShardWriter::create(dir / shard.file);
        if (!writer)
            return writer.error();
        for (uint64_t copied = 0; copied < shard.tokens;) {
            buffer.resize(static_cast<std::size_t>(std::min<uint64_t>(kCopyTokens, shard.tokens - copied)));
            stream.read(reinterpret_cast<char*>(buffer.data()), static_cast<std::streamsize>(buffer.size() * 2));
            if (!stream)
                return Error::make(errc::kIoError, "cannot read back the token stream");
            if (Status status = writer->append(buffer); !status)
                return status.error();
            copied += buffer.size();
            advanced(buffer.size());
        }
        if (Status status = writer->finish(); !status)
            return status.error();
        written += shard.tokens;
        shards.push_back(std::move(shard));
    }
    return shards;
}

nlohmann::ordered_json shardList(const std::vector<PreparedShard>& shards)
{
    auto list = nlohmann::ordered_json::array();
    for (const auto& shard : shards)
        list.push_back({{"file", shard.file}, {"tokens", shard.tokens}});
    return list;
}

std::string metaJson(const PrepareOptions& options, const PrepareSummary& summary, const Tokenizer& tokenizer,
    const std::vector<std::filesystem::path>& files)
{
    nlohmann::ordered_json meta;
    meta["format"] = "crowdtrain-data";
    meta["version"] = 1;
    meta["created_by"] = std::string("crowdtrain-prepare ") + kVersion;
    meta["tokenizer"] = {{"kind", summary.tokenizerKind}, {"vocab_size", summary.vocabSize}, {"dir", "tokenizer"},
        {"end_of_text", tokenizer.endOfText() ? nlohmann::ordered_json(*tokenizer.endOfText()) : nullptr}};
    meta["tokens"] = {
        {"total", summary.trainTokens + summary.valTokens}, {"train", summary.trainTokens}, {"val", summary.valTokens}};
    meta["val_fraction"] = options.valFraction;
    meta["shard_tokens"] = options.shardTokens;
    meta["shards"] = {{"train", shardList(summary.trainShards)}, {"val", shardList(summary.valShards)}};
    auto sources = nlohmann::ordered_json::array();
    for (const auto& file : files)
        sources.push_back(file.string());
    meta["sources"] = sources;
    return meta.dump(2) + "\n";
}

} // namespace

Result<PrepareSummary> prepareDataSet(const PrepareOptions& options, const PrepareProgressCallback& progress)
{
    if (Status status = validate(options); !status)
        return status.error();
    auto files = listCorpusFiles(options.inputs);
    if (!files)
        return files.error();
    PrepareSummary summary;
    summary.inputFiles = files->size();
    std::error_code ec;
    for (const auto& file : *files) {
        const auto bytes = std::filesystem::file_size(file, ec);
        summary.inputBytes += ec ? 0 : bytes;
    }

    std::filesystem::path inputName = std::filesystem::absolute(options.inputs.front(), ec).lexically_normal();
    if (!inputName.has_filename())
        inputName = inputName.parent_path();
    const std::string prefix = sanitizedName(options.name.empty() ? inputName.stem().string() : options.name);
    if (shardRoleOf(shardName(prefix, "train", 0)) != ShardRole::Train
        || shardRoleOf(shardName(prefix, "val", 0)) != ShardRole::Val)
        return Error::make(errc::kBadArgument,
            "shard names starting '" + prefix + "' would not say clearly train or val; choose another name");

    auto tokenizer = makeTokenizer(options, *files, summary.inputBytes, progress);
    if (!tokenizer)
        return tokenizer.error();
    summary.tokenizerKind = (*tokenizer)->kind();
    summary.vocabSize = (*tokenizer)->vocabSize();
    if (summary.vocabSize > 65536)
        return Error::make(errc::kVocabularyTooLarge,
            "a vocabulary of " + std::to_string(summary.vocabSize) + " tokens does not fit uint16 shards");

    std::filesystem::path out = std::filesystem::absolute(options.outDir, ec).lexically_normal();
    if (ec)
        return Error::make(errc::kIoError, options.outDir.string() + ": " + ec.message());
    if (!out.has_filename())
        out = out.parent_path();
    auto staging = StagingFolder::create(out);
    if (!staging)
        return staging.error();
    if (Status status = (*tokenizer)->save(staging->path() / "tokenizer"); !status)
        return status.error();

    const auto streamPath = staging->path() / kStreamFile;
    auto total = tokenize(**tokenizer, *files, streamPath, summary.inputBytes, progress);
    if (!total)
        return total.error();
    // The first int(n * (1 - f)) tokens train, the rest validate, as nanoGPT
    // splits; a nonzero fraction keeps at least one validation token.
    summary.trainTokens = static_cast<uint64_t>(static_cast<double>(*total) * (1.0 - options.valFraction));
    if (options.valFraction > 0 && summary.trainTokens == *total && *total >= 2)
        --summary.trainTokens;
    summary.valTokens = *total - summary.trainTokens;
    if (summary.trainTokens == 0)
        return Error::make(errc::kCorpusTooSmall, "the corpus has too few tokens (" + std::to_string(*total) + ")");

    std::ifstream stream(streamPath, std::ios::binary);
    uint64_t written = 0;
    const auto advanced = [&](uint64_t tokens) {
        written += tokens;
        if (progress)
            progress({"writing", written, *total});
    };
    auto train
        = writeShards(stream, summary.trainTokens, staging->path(), prefix, "train", options.shardTokens, advanced);
    if (!train)
        return train.error();
    auto val = writeShards(stream, summary.valTokens, staging->path(), prefix, "val", options.shardTokens, advanced);
    if (!val)
        return val.error();
    stream.close();
    std::filesystem::remove(streamPath, ec);
    summary.trainShards = std::move(*train);
    summary.valShards = std::move(*val);

    if (Status status
        = core::writeFileAtomic(staging->path() / "meta.json", metaJson(options, summary, **tokenizer, *files));
        !status)
        return status.error();
    if (Status status = staging->commit(); !status)
        return status.error();
    return summary;
}

} // namespace crowdtrain::engine
