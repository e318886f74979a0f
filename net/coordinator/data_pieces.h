#pragma once

// The tokens tasks train on, served as resources of the project's table so
// that a volunteer needs nothing but the hub's address (docs/protocol.md,
// "Data pieces"):
//   "task-data/<task id>"        every range of an open task, back to back in
//                                the task's order: a task's data in one
//                                describe and one fetch per 1 MiB chunk (one
//                                round trip each on a home link);
//   "data/<shard>/<begin>-<end>" one range of a train shard (a task's ranges
//                                one by one, as workers before it fetched them).
// Both hold uint16 little-endian tokens and are built when first asked for;
// at most kMaxBytesHeld of them stay in memory, the oldest are withdrawn
// and built again when asked for.
//
// Used from the server's loop thread only (as ProjectRuntime is).

#include "core/result.h"
#include "engine/data_set.h"
#include "net/coordinator/data_plan.h"
#include "net/transfer/resource_table.h"
#include "net/wire/limits.h"
#include "net/wire/messages_common.h"

#include <deque>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace crowdtrain::coordinator {

// "data/<shard>/<begin>-<end>"
std::string pieceResourceName(const net::ShardRange& range);
// "task-data/<task id>"
std::string taskDataResourceName(uint64_t taskId);

class DataPieces {
public:
    static constexpr uint64_t kMaxBytesHeld = 64u << 20;
    // The pieces of `taskId` when it is an open task of the asking key; nullptr otherwise.
    using TaskPieces = std::function<const std::vector<Piece>*(uint64_t taskId)>;

    // `maxRangeTokens`: the longest range a piece name may ask for.
    DataPieces(net::ResourceTable& resources, const engine::DataSet& data, uint64_t maxRangeTokens);

    // A name this class serves (whether or not it exists).
    static bool handles(std::string_view name);
    // Builds resource `name` into the table unless it is there. Errors:
    // "not_found" (a range outside the train shards or too long; a task that
    // is not an open task of the asker), the table's own.
    Status prepare(const std::string& name, const TaskPieces& taskPieces);

private:
    Status preparePiece(const std::string& name);
    Status prepareTaskData(const std::string& name, const TaskPieces& taskPieces);
    Status add(const std::string& name, std::string bytes, uint64_t chunkBytes);

    net::ResourceTable& m_resources;
    const engine::DataSet& m_data;
    uint64_t m_maxRangeTokens;
    // Built resources in the table, oldest first, and their bytes.
    std::deque<std::pair<std::string, uint64_t>> m_built;
    uint64_t m_builtBytes = 0;
};

} // namespace crowdtrain::coordinator
