#pragma once

// Which training tokens go to which volunteer, so that no data is trained
// twice in an epoch and a vanished volunteer's data goes back to the pool.
//
// The train shards are cut into ranges of tokensPerRange tokens (one task:
// H * batch * block + 1). Consecutive ranges of a shard overlap by one token
// (the last target of one is the first input of the next), so each token is
// predicted exactly once per epoch; a shard's tail shorter than a range is
// not used. Each epoch hands the ranges out in a shuffled order drawn from
// (seed, epoch); a released or expired range goes to the front of the pool.
// When every range of the epoch is completed the epoch increments and the
// pool refills.
//
// serialize() keeps the epoch, the completed ranges and the next lease id;
// restore() brings them back, and ranges that were leased but not completed
// go back to the pool. Not thread-safe: the coordinator's round owns it.

#include "engine/batch_sampler.h"
#include "engine/data_set.h"
#include "engine/result.h"

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace crowdtrain::coordinator {

struct Lease {
    uint64_t id = 0; // unique across restarts of the plan
    std::string publicKey;
    uint64_t epoch = 0;
    uint32_t range = 0; // index over all ranges of all shards
    uint32_t shard = 0; // index into the data set's train shards
    uint64_t begin = 0; // tokens [begin, end) of that shard
    uint64_t end = 0;
    int64_t deadlineMs = 0;
};

class DataPlan {
public:
    // shardTokens: the token count of each train shard, in the data set's
    // order. Error when no shard holds a whole range, or tokensPerRange < 2.
    static Result<DataPlan> create(
        std::vector<uint64_t> shardTokens, uint64_t tokensPerRange, uint64_t seed, int64_t leaseDurationMs);
    static Result<DataPlan> create(
        const engine::DataSet& data, uint64_t tokensPerRange, uint64_t seed, int64_t leaseDurationMs);

    // The next range of the pool, or nothing when every range of the epoch
    // is leased or completed (wait for completions, releases or expiries).
    std::optional<Lease> lease(const std::string& publicKey, int64_t nowMs);

    // The lease's submission was accepted: its range is done for this epoch.
    // Error for an unknown lease (completed, released or expired already).
    Status complete(uint64_t leaseId);

    // Marks a range done without a lease: a durable acceptance replayed
    // after a restart. Error when the range is unknown or already done.
    Status completeRange(uint32_t range);
    // Returns a vanished volunteer's outstanding ranges to the pool.
    std::vector<Lease> release(const std::string& publicKey);
    // Returns one lease's range to the pool (its submission was rejected).
    bool releaseLease(uint64_t leaseId);
    // Returns leases past their deadline to the pool.
    std::vector<Lease> expire(int64_t nowMs);

    std::optional<Lease> findLease(uint64_t leaseId) const;
    // The range a lease covers, in the data set it was created from.
    static engine::ShardSlice sliceOf(const Lease& lease, const engine::DataSet& data);

    uint64_t epoch() const { return m_epoch; }
    std::size_t rangeCount() const { return m_ranges.size(); }
    std::size_t completedCount() const { return m_completedCount; }
    std::size_t leasedCount() const { return m_leases.size(); }
    std::size_t availableCount() const { return m_pool.size(); }
    uint64_t tokensPerRange() const { return m_tokensPerRange; }

    // Epoch, completed ranges, next lease id and a fingerprint of the ranges.
    std::string serialize() const;
    // Error (and no change) if the blob is damaged or was written for other
    // shards, range size or seed.
    Status restore(std::string_view blob);

private:
    struct Range {
        uint32_t shard;
        uint64_t begin;
        uint64_t end;
    };

    DataPlan() = default;
    void refillPool();
    Status markCompleted(uint32_t range);
    uint64_t fingerprint() const;
    Lease leaseOfRange(uint32_t range) const;

    std::vector<Range> m_ranges;
    uint64_t m_tokensPerRange = 0;
    uint64_t m_seed = 0;
    int64_t m_leaseDurationMs = 0;
    uint64_t m_epoch = 0;
    uint64_t m_nextLeaseId = 1;
    std::vector<bool> m_completed; // by range, this epoch
    std::size_t m_completedCount = 0;
    std::deque<uint32_t> m_pool; // ranges neither leased nor completed, in hand-out order
    std::map<uint64_t, Lease> m_leases; // by lease id
};

} // namespace crowdtrain::coordinator
