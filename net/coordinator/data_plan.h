#pragma once

// Which training tokens go to which volunteer, so that no data is trained
// twice in an epoch and a vanished volunteer's data goes back to the pool.
//
// The train shards are cut into pieces of pieceTokens tokens (a whole number
// of windows + 1). Consecutive pieces of a shard overlap by one token (the
// last target of one is the first input of the next), so each token is
// predicted exactly once per epoch; a shard's tail shorter than a piece is
// not used. A range (one task's data) is piecesPerRange pieces drawn from
// all over the data by a permutation fixed by the seed, so that a task's
// windows are spread over the corpus rather than one contiguous stretch of
// it (contiguous text makes every volunteer's inner steps drift towards its
// own scene); pieces left over after the last whole range are not used.
// Each epoch hands the ranges out in a shuffled order drawn from (seed,
// epoch); a released or expired range goes to the front of the pool.
// When every range of the epoch is completed, or a lease is asked for while
// every range not completed is leased, the epoch increments and the pool
// refills; a range still leased in the old epoch joins the new pool when its
// lease ends (at the back when completed, at the front when released), so
// volunteers never wait for an epoch's last ranges and no range is ever
// leased twice at once.
//
// serialize() keeps the epoch, the completed ranges and the next lease id;
// restore() brings them back, and ranges that were leased but not completed
// go back to the pool. Not thread-safe: the coordinator's round owns it.

#include "core/result.h"
#include "engine/batch_sampler.h"
#include "engine/data_set.h"

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace crowdtrain::coordinator {

// Tokens [begin, end) of one train shard.
struct Piece {
    uint32_t shard = 0; // index into the data set's train shards
    uint64_t begin = 0;
    uint64_t end = 0;
    bool operator==(const Piece&) const = default;
};

struct Lease {
    uint64_t id = 0; // unique across restarts of the plan
    std::string publicKey;
    uint64_t epoch = 0;
    uint32_t range = 0; // index over all ranges
    std::vector<Piece> pieces; // the range's data, in the order the task lists it
    int64_t deadlineMs = 0;
};

class DataPlan {
public:
    // shardTokens: the token count of each train shard, in the data set's
    // order. Error when the shards hold fewer than piecesPerRange pieces,
    // pieceTokens < 2 or piecesPerRange < 1.
    static Result<DataPlan> create(std::vector<uint64_t> shardTokens, uint64_t pieceTokens, uint64_t seed,
        int64_t leaseDurationMs, uint32_t piecesPerRange = 1);
    static Result<DataPlan> create(const engine::DataSet& data, uint64_t pieceTokens, uint64_t seed,
        int64_t leaseDurationMs, uint32_t piecesPerRange = 1);

    // The next range of the pool (starting the next epoch when this one's
    // pool is empty), or nothing when every range is leased (wait for
    // completions, releases or expiries).
    std::optional<Lease> lease(const std::string& publicKey, int64_t nowMs);
    // Whether lease() would hand out a range now.
    bool canLease() const;

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

    // Takes back a lease handed out before a restart (its id, key, epoch,
    // range and deadline; the pieces are filled in here). Error, and no
    // change, unless the range is open in this epoch and not leased, and the
    // id is below nextLeaseId().
    Result<Lease> restoreLease(Lease lease);

    std::optional<Lease> findLease(uint64_t leaseId) const;
    // The id the next lease gets. Ids only grow; skipLeaseIdsBelow(n) makes
    // the next one at least n (ids handed out after the last commit, which
    // the blob does not know, must not be handed out again after a restart).
    uint64_t nextLeaseId() const { return m_nextLeaseId; }
    void skipLeaseIdsBelow(uint64_t id) { m_nextLeaseId = std::max(m_nextLeaseId, id); }
    // The pieces a lease covers, in the data set it was created from (empty
    // when a piece names a shard the data set does not have).
    static std::vector<engine::ShardSlice> slicesOf(const Lease& lease, const engine::DataSet& data);

    uint64_t epoch() const { return m_epoch; }
    std::size_t rangeCount() const { return m_ranges.size(); }
    std::size_t completedCount() const { return m_completedCount; }
    std::size_t leasedCount() const { return m_leases.size(); }
    std::size_t availableCount() const { return m_pool.size(); }
    uint64_t pieceTokens() const { return m_pieceTokens; }

    // Epoch, completed ranges, next lease id and a fingerprint of the ranges.
    std::string serialize() const;
    // Error (and no change) if the blob is damaged or was written for other
    // shards, range size or seed.
    Status restore(std::string_view blob);

private:
    DataPlan() = default;
    void refillPool();
    void startEpoch();
    Status markCompleted(uint32_t range);
    uint64_t fingerprint() const;
    Lease leaseOfRange(uint32_t range) const;

    std::vector<std::vector<Piece>> m_ranges;
    uint64_t m_pieceTokens = 0;
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
