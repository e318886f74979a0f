#include "net/coordinator/data_pieces.h"

#include "net/wire/error_codes.h"

#include <optional>
#include <tuple>

namespace crowdtrain::coordinator {
namespace {

constexpr std::string_view kPiecePrefix = "data/";
constexpr std::string_view kTaskDataPrefix = "task-data/";

std::optional<uint64_t> parseNumber(std::string_view digits)
{
    uint64_t value = 0;
    if (digits.empty() || digits.size() > 19)
        return std::nullopt;
    for (char c : digits) {
        if (c < '0' || c > '9')
            return std::nullopt;
        value = value * 10 + uint64_t(c - '0');
    }
    return value;
}

// "data/<shard>/<begin>-<end>" -> its parts.
std::optional<std::tuple<std::string, uint64_t, uint64_t>> parsePieceName(std::string_view name)
{
    if (!name.starts_with(kPiecePrefix))
        return std::nullopt;
    name.remove_prefix(kPiecePrefix.size());
    const auto slash = name.rfind('/');
    const auto dash = name.rfind('-');
    if (slash == std::string_view::npos || slash == 0 || dash == std::string_view::npos || dash < slash)
        return std::nullopt;
    const auto begin = parseNumber(name.substr(slash + 1, dash - slash - 1));
    const auto end = parseNumber(name.substr(dash + 1));
    if (!begin || !end)
        return std::nullopt;
    return std::make_tuple(std::string(name.substr(0, slash)), *begin, *end);
}

} // namespace

std::string pieceResourceName(const net::ShardRange& range)
{
    return std::string(kPiecePrefix) + range.shard + "/" + std::to_string(range.beginToken) + "-"
        + std::to_string(range.endToken);
}

std::string taskDataResourceName(uint64_t taskId)
{
    return std::string(kTaskDataPrefix) + std::to_string(taskId);
}

DataPieces::DataPieces(net::ResourceTable& resources, const engine::DataSet& data, uint64_t maxRangeTokens)
    : m_resources(resources)
    , m_data(data)
    , m_maxRangeTokens(maxRangeTokens)
{ }

bool DataPieces::handles(std::string_view name)
{
    return name.starts_with(kPiecePrefix) || name.starts_with(kTaskDataPrefix);
}

Status DataPieces::prepare(const std::string& name, const TaskPieces& taskPieces)
{
    if (m_resources.contains(name))
        return Status::success();
    if (name.starts_with(kTaskDataPrefix))
        return prepareTaskData(name, taskPieces);
    return preparePiece(name);
}

Status DataPieces::preparePiece(const std::string& name)
{
    const auto piece = parsePieceName(name);
    const engine::TokenShard* shard = nullptr;
    if (piece)
        for (const engine::TokenShard& s : m_data.train)
            if (s.path().filename() == std::get<0>(*piece))
                shard = &s;
    if (!piece || !shard || std::get<1>(*piece) >= std::get<2>(*piece) || std::get<2>(*piece) > shard->size()
        || std::get<2>(*piece) - std::get<1>(*piece) > m_maxRangeTokens)
        return Error::make(net::errc::kNotFound,
            "no data piece \"" + name + "\": pieces are data/<train shard>/<begin>-<end>, at most "
                + std::to_string(m_maxRangeTokens) + " tokens inside the shard");
    const auto [shardName, begin, end] = *piece;
    return add(name,
        std::string(reinterpret_cast<const char*>(shard->tokens() + begin), (end - begin) * sizeof(uint16_t)),
        net::kDefaultChunkBytes);
}

Status DataPieces::prepareTaskData(const std::string& name, const TaskPieces& taskPieces)
{
    const auto id = parseNumber(std::string_view(name).substr(kTaskDataPrefix.size()));
    const std::vector<Piece>* pieces = id ? taskPieces(*id) : nullptr;
    if (!pieces)
        return Error::make(net::errc::kNotFound,
            "no resource \"" + name + "\": task-data/<id> names an open task of the asking volunteer");
    uint64_t tokens = 0;
    for (const Piece& piece : *pieces) {
        if (piece.shard >= m_data.train.size() || piece.begin >= piece.end
            || piece.end > m_data.train[piece.shard].size())
            return Error::make(
                net::errc::kNotFound, "task " + std::to_string(*id) + " names tokens outside its shards");
        tokens += piece.end - piece.begin;
    }
    std::string bytes;
    bytes.reserve(tokens * sizeof(uint16_t));
    for (const Piece& piece : *pieces) {
        const auto* first = reinterpret_cast<const char*>(m_data.train[piece.shard].tokens() + piece.begin);
        bytes.append(first, (piece.end - piece.begin) * sizeof(uint16_t));
    }
    // 1 MiB like every chunk: a volunteer's transfer timeout (10 s at least)
    // then holds on links down to about 1 Mbit/s.
    return add(name, std::move(bytes), net::kDefaultChunkBytes);
}

Status DataPieces::add(const std::string& name, std::string bytes, uint64_t chunkBytes)
{
    const uint64_t size = bytes.size();
    if (Status s = m_resources.addBlob(name, std::move(bytes), chunkBytes); !s)
        return s;
    m_built.emplace_back(name, size);
    m_builtBytes += size;
    while (m_builtBytes > kMaxBytesHeld && m_built.size() > 1) {
        m_resources.remove(m_built.front().first);
        m_builtBytes -= m_built.front().second;
        m_built.pop_front();
    }
    return Status::success();
}

} // namespace crowdtrain::coordinator
