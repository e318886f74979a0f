#include "net/coordinator/checkpoint_store.h"
#include "net/wire/error_codes.h"

#include "net/transfer/sha256.h"

#include "core/file_io.h"
#include "engine/hf_gpt2.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <map>

namespace crowdtrain::coordinator {
namespace {

using nlohmann::json;

constexpr const char* kMetadataFile = "metadata.json";

std::string roundDirName(int64_t round)
{
    return "round-" + std::to_string(round);
}

std::optional<int64_t> roundOfDirName(const std::string& name)
{
    if (!name.starts_with("round-") || name.size() == 6 || name.size() > 6 + 18)
        return std::nullopt;
    int64_t round = 0;
    for (char c : name.substr(6)) {
        if (c < '0' || c > '9')
            return std::nullopt;
        round = round * 10 + (c - '0');
    }
    return round;
}

std::string isoUtc(int64_t ms)
{
    const std::time_t seconds = std::time_t(ms / 1000);
    std::tm utc{};
    gmtime_r(&seconds, &utc);
    char text[32];
    std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
    return text;
}

Result<CheckpointInfo> readInfo(const std::filesystem::path& dir)
{
    const auto file = dir / kMetadataFile;
    auto text = core::readFile(file);
    if (!text)
        return text.error();
    try {
        const json meta = json::parse(*text);
        CheckpointInfo info;
        info.round = meta.at("round").get<int64_t>();
        info.tokens = meta.at("tokens").get<int64_t>();
        if (!meta.at("val_loss").is_null())
            info.valLoss = meta.at("val_loss").get<double>();
        info.created = meta.at("created").get<std::string>();
        info.createdMs = meta.at("created_ms").get<int64_t>();
        info.dir = dir;
        for (const json& f : meta.at("files"))
            info.files.push_back(
                {f.at("name").get<std::string>(), f.at("bytes").get<uint64_t>(), f.at("sha256").get<std::string>()});
        return info;
    } catch (const json::exception& e) {
        return Error::make(net::errc::kBadCheckpoint, file.string() + ": " + e.what());
    }
}

Status removeTree(const std::filesystem::path& dir)
{
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    if (ec)
        return Error::make(net::errc::kIoError, "cannot remove " + dir.string() + ": " + ec.message());
    return Status::success();
}

} // namespace

uint64_t CheckpointInfo::totalBytes() const
{
    uint64_t total = 0;
    for (const CheckpointFile& f : files)
        total += f.bytes;
    return total;
}

namespace {

Result<engine::NamedTensors> namedOver(const engine::GptConfig& config, std::span<const float> flat, bool copy)
{
    engine::NamedTensors named;
    std::size_t offset = 0;
    for (const auto& [name, shape] : engine::gptParameterShapes(config)) {
        int64_t count = 1;
        for (int64_t d : shape)
            count *= d;
        if (offset + std::size_t(count) > flat.size())
            return Error::make(net::errc::kBadParameters,
                "the flat vector holds " + std::to_string(flat.size()) + " values, fewer than the model's");
        // from_blob does not own the memory: cloned into a tensor that does, unless views are asked for.
        torch::Tensor t = torch::from_blob(const_cast<float*>(flat.data() + offset), shape, torch::kFloat32);
        named.emplace_back(name, copy ? t.clone() : t);
        offset += std::size_t(count);
    }
    if (offset != flat.size())
        return Error::make(net::errc::kBadParameters,
            "the flat vector holds " + std::to_string(flat.size()) + " values, the model " + std::to_string(offset));
    return named;
}

} // namespace

Result<engine::NamedTensors> unflattenParameters(const engine::GptConfig& config, std::span<const float> flat)
{
    return namedOver(config, flat, true);
}

Result<engine::NamedTensors> parameterViews(const engine::GptConfig& config, std::span<const float> flat)
{
    return namedOver(config, flat, false);
}

CheckpointStore::CheckpointStore(std::filesystem::path dir, CheckpointSpec retention)
    : m_dir(std::move(dir))
    , m_retention(retention)
{ }

Result<CheckpointStore> CheckpointStore::open(const std::filesystem::path& dir, const CheckpointSpec& retention)
{
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec)
        return Error::make(net::errc::kIoError, "cannot create " + dir.string() + ": " + ec.message());
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
        const std::string name = entry.path().filename().string();
        if (name.starts_with(".round-") && name.find(".tmp-") != std::string::npos) {
            if (Status s = removeTree(entry.path()); !s)
                return s.error();
        }
    }
    if (ec)
        return Error::make(net::errc::kIoError, "cannot list " + dir.string() + ": " + ec.message());
    return CheckpointStore(dir, retention);
}

bool CheckpointStore::isDue(int64_t round) const
{
    return round > 0 && m_retention.everyRounds > 0 && round % m_retention.everyRounds == 0;
}

Result<CheckpointInfo> CheckpointStore::publish(int64_t round, int64_t tokens, std::optional<double> valLoss,
    const engine::GptConfig& config, const engine::NamedTensors& parameters, int64_t nowMs,
    const std::map<std::string, std::string>& extraFiles)
{
    const std::filesystem::path target = m_dir / roundDirName(round);
    if (round < 0 || std::filesystem::exists(target))
        return Error::make(net::errc::kCheckpointExists, target.string() + " is already published");
    const std::filesystem::path staging = core::temporarySibling(target);
    std::error_code ec;
    std::filesystem::create_directory(staging, ec);
    if (ec)
        return Error::make(net::errc::kIoError, "cannot create " + staging.string() + ": " + ec.message());
    // Everything below writes into the hidden folder; any failure removes it.
    auto fail = [&](Error error) -> Result<CheckpointInfo> {
        (void)removeTree(staging);
        return error;
    };
    const std::map<std::string, std::string> extra{
        {"round", std::to_string(round)}, {"tokens", std::to_string(tokens)}};
    if (Status s = engine::exportHuggingFaceGpt2(staging, config, parameters, extra); !s)
        return fail(s.error());
    std::vector<std::string> names{"config.json", "model.safetensors"};
    for (const auto& [name, contents] : extraFiles) {
        if (name.empty() || name.find('/') != std::string::npos || name == kMetadataFile
            || std::find(names.begin(), names.end(), name) != names.end())
            return fail(Error::make(net::errc::kInvalidArgument, "'" + name + "' cannot be a checkpoint file"));
        if (Status s = core::writeFileAtomic(staging / name, contents); !s)
            return fail(s.error());
        names.push_back(name);
    }

    CheckpointInfo info;
    info.round = round;
    info.tokens = tokens;
    info.valLoss = valLoss && std::isfinite(*valLoss) ? valLoss : std::nullopt;
    info.createdMs = nowMs;
    info.created = isoUtc(nowMs);
    json files = json::array();
    for (const std::string& name : names) {
        auto hash = net::sha256OfFile(staging / name);
        if (!hash)
            return fail(hash.error());
        const uint64_t bytes = std::filesystem::file_size(staging / name, ec);
        if (ec)
            return fail(
                Error::make(net::errc::kIoError, "cannot stat " + (staging / name).string() + ": " + ec.message()));
        info.files.push_back({name, bytes, *hash});
        files.push_back({{"name", name}, {"bytes", bytes}, {"sha256", *hash}});
    }
    const json meta{{"round", round}, {"tokens", tokens},
        {"val_loss", info.valLoss ? json(*info.valLoss) : json(nullptr)}, {"created", info.created},
        {"created_ms", nowMs}, {"files", files}};
    if (Status s = core::writeFileAtomic(staging / kMetadataFile, meta.dump(2) + "\n"); !s)
        return fail(s.error());
    if (Status s = core::syncFolder(staging); !s)
        return fail(s.error());
    std::filesystem::rename(staging, target, ec);
    if (ec)
        return fail(Error::make(net::errc::kIoError, "cannot rename into " + target.string() + ": " + ec.message()));
    if (Status s = core::syncFolder(m_dir); !s)
        return s.error();
    info.dir = target;
    if (auto pruned = applyRetention(); !pruned)
        return pruned.error();
    return info;
}

Result<std::vector<CheckpointInfo>> CheckpointStore::list() const
{
    std::vector<CheckpointInfo> out;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(m_dir, ec)) {
        const auto round = roundOfDirName(entry.path().filename().string());
        if (!round || !entry.is_directory())
            continue;
        auto info = readInfo(entry.path());
        if (info && info->round == *round)
            out.push_back(std::move(*info));
    }
    if (ec)
        return Error::make(net::errc::kIoError, "cannot list " + m_dir.string() + ": " + ec.message());
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.round < b.round; });
    return out;
}

Result<CheckpointInfo> CheckpointStore::find(int64_t round) const
{
    return readInfo(m_dir / roundDirName(round));
}

Result<std::vector<int64_t>> CheckpointStore::applyRetention()
{
    auto all = list();
    if (!all)
        return all.error();
    std::vector<int64_t> removed;
    const std::size_t keepFrom
        = all->size() > std::size_t(m_retention.keepLast) ? all->size() - std::size_t(m_retention.keepLast) : 0;
    for (std::size_t i = 0; i < keepFrom; ++i) {
        const int64_t round = (*all)[i].round;
        if (m_retention.milestoneEvery > 0 && round % m_retention.milestoneEvery == 0)
            continue;
        // Renamed first so a crash mid-removal leaves a temporary, not a torn checkpoint.
        const auto doomed = core::temporarySibling((*all)[i].dir);
        std::error_code ec;
        std::filesystem::rename((*all)[i].dir, doomed, ec);
        if (ec)
            return Error::make(net::errc::kIoError, "cannot remove " + (*all)[i].dir.string() + ": " + ec.message());
        if (Status s = removeTree(doomed); !s)
            return s.error();
        removed.push_back(round);
    }
    if (!removed.empty()) {
        if (Status s = core::syncFolder(m_dir); !s)
            return s.error();
    }
    return removed;
}

} // namespace crowdtrain::coordinator
