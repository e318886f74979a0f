#include "net/coordinator/data_plan.h"
#include "net/wire/error_codes.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>
#include <tuple>

namespace crowdtrain::coordinator {
namespace {

constexpr char kMagic[8] = {'C', 'T', 'D', 'P', 'L', 'A', 'N', '1'};
constexpr uint32_t kFormatVersion = 2; // 2: ranges of pieces
constexpr std::size_t kHeaderBytes = 8 + 4 + 4 + 8 * 4;

uint64_t splitmix64(uint64_t& state)
{
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t fnv1a(uint64_t hash, std::string_view bytes)
{
    for (unsigned char c : bytes) {
        hash ^= c;
        hash *= 0x100000001B3ull;
    }
    return hash;
}

constexpr uint64_t kFnvOffset = 0xCBF29CE484222325ull;

void putU64(std::string& out, uint64_t v)
{
    for (int i = 0; i < 8; ++i)
        out.push_back(char((v >> (8 * i)) & 0xFF));
}

void putU32(std::string& out, uint32_t v)
{
    for (int i = 0; i < 4; ++i)
        out.push_back(char((v >> (8 * i)) & 0xFF));
}

uint64_t getU64(std::string_view in, std::size_t offset)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i)
        v = (v << 8) | uint8_t(in[offset + std::size_t(i)]);
    return v;
}

uint32_t getU32(std::string_view in, std::size_t offset)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; --i)
        v = (v << 8) | uint8_t(in[offset + std::size_t(i)]);
    return v;
}

Error badBlob(const std::string& why)
{
    return Error::make(net::errc::kBadDataPlan, "saved data plan " + why);
}

} // namespace

Result<DataPlan> DataPlan::create(std::vector<uint64_t> shardTokens, uint64_t pieceTokens, uint64_t seed,
    int64_t leaseDurationMs, uint32_t piecesPerRange)
{
    if (pieceTokens < 2)
        return Error::make(net::errc::kBadDataPlan, "a piece needs at least 2 tokens");
    if (piecesPerRange < 1)
        return Error::make(net::errc::kBadDataPlan, "a range needs at least one piece");
    if (leaseDurationMs <= 0)
        return Error::make(net::errc::kBadDataPlan, "the lease duration must be positive");
    DataPlan plan;
    plan.m_pieceTokens = pieceTokens;
    plan.m_seed = seed;
    plan.m_leaseDurationMs = leaseDurationMs;
    // Stride pieceTokens - 1: the last target of a piece is the first input
    // of the next, so every token is predicted once.
    const uint64_t stride = pieceTokens - 1;
    std::vector<Piece> pieces;
    for (std::size_t shard = 0; shard < shardTokens.size(); ++shard) {
        for (uint64_t begin = 0; shardTokens[shard] >= pieceTokens && begin <= shardTokens[shard] - pieceTokens;
             begin += stride) {
            if (pieces.size() >= std::numeric_limits<uint32_t>::max())
                return Error::make(net::errc::kBadDataPlan, "too many pieces: use larger tasks");
            pieces.push_back(Piece{uint32_t(shard), begin, begin + pieceTokens});
        }
    }
    if (pieces.size() < piecesPerRange)
        return Error::make(net::errc::kBadDataPlan,
            "the train shards hold " + std::to_string(pieces.size()) + " pieces of " + std::to_string(pieceTokens)
                + " tokens; a task needs " + std::to_string(piecesPerRange));
    if (piecesPerRange > 1) {
        // Ranges gather pieces from all over the data; the grouping is fixed
        // by the seed so that a restarted coordinator rebuilds it.
        uint64_t state = seed ^ 0x5851F42D4C957F2Dull;
        for (std::size_t i = pieces.size(); i > 1; --i)
            std::swap(pieces[i - 1], pieces[splitmix64(state) % i]);
    }
    for (std::size_t first = 0; first + piecesPerRange <= pieces.size(); first += piecesPerRange) {
        std::vector<Piece> range(
            pieces.begin() + std::ptrdiff_t(first), pieces.begin() + std::ptrdiff_t(first + piecesPerRange));
        // In corpus order within the task: the volunteer shuffles the windows anyway.
        std::sort(range.begin(), range.end(),
            [](const Piece& a, const Piece& b) { return std::tie(a.shard, a.begin) < std::tie(b.shard, b.begin); });
        plan.m_ranges.push_back(std::move(range));
    }
    plan.m_completed.assign(plan.m_ranges.size(), false);
    plan.refillPool();
    return plan;
}

Result<DataPlan> DataPlan::create(
    const engine::DataSet& data, uint64_t pieceTokens, uint64_t seed, int64_t leaseDurationMs, uint32_t piecesPerRange)
{
    std::vector<uint64_t> sizes;
    for (const engine::TokenShard& shard : data.train)
        sizes.push_back(shard.size());
    return create(std::move(sizes), pieceTokens, seed, leaseDurationMs, piecesPerRange);
}

void DataPlan::refillPool()
{
    std::vector<uint32_t> order(m_ranges.size());
    std::iota(order.begin(), order.end(), 0u);
    // Our own Fisher-Yates: std::shuffle's sequence differs between standard
    // libraries, and a restarted coordinator must rebuild the same order.
    uint64_t state = m_seed ^ (m_epoch * 0xD1B54A32D192ED03ull);
    for (std::size_t i = order.size(); i > 1; --i)
        std::swap(order[i - 1], order[splitmix64(state) % i]);
    std::vector<bool> leased(m_ranges.size(), false);
    for (const auto& [id, lease] : m_leases)
        leased[lease.range] = true;
    m_pool.clear();
    for (uint32_t range : order) {
        if (!m_completed[range] && !leased[range])
            m_pool.push_back(range);
    }
}

std::optional<Lease> DataPlan::lease(const std::string& publicKey, int64_t nowMs)
{
    // The epoch's last ranges are out: the next epoch starts now rather than
    // when they come back, so nobody waits for the stragglers of the old one.
    if (m_pool.empty() && m_leases.size() < m_ranges.size())
        startEpoch();
    if (m_pool.empty())
        return std::nullopt;
    const uint32_t range = m_pool.front();
    m_pool.pop_front();
    Lease lease = leaseOfRange(range);
    lease.id = m_nextLeaseId++;
    lease.publicKey = publicKey;
    lease.deadlineMs = nowMs + m_leaseDurationMs;
    m_leases.emplace(lease.id, lease);
    return lease;
}

Result<Lease> DataPlan::restoreLease(Lease lease)
{
    const auto refuse = [&](const std::string& why) {
        return Error::make(net::errc::kStaleLease, "lease " + std::to_string(lease.id) + " cannot be restored: " + why);
    };
    if (lease.epoch != m_epoch)
        return refuse("it is of epoch " + std::to_string(lease.epoch) + ", the plan is in " + std::to_string(m_epoch));
    if (lease.range >= m_ranges.size() || m_completed[lease.range])
        return refuse("range " + std::to_string(lease.range) + " is not open");
    if (lease.id == 0 || lease.id >= m_nextLeaseId || m_leases.contains(lease.id))
        return refuse("the id was not handed out or is in use");
    const auto inPool = std::find(m_pool.begin(), m_pool.end(), lease.range);
    if (inPool == m_pool.end())
        return refuse("range " + std::to_string(lease.range) + " is leased already");
    m_pool.erase(inPool);
    lease.pieces = m_ranges[lease.range];
    m_leases.emplace(lease.id, lease);
    return lease;
}

Lease DataPlan::leaseOfRange(uint32_t range) const
{
    Lease lease;
    lease.epoch = m_epoch;
    lease.range = range;
    lease.pieces = m_ranges[range];
    return lease;
}

Status DataPlan::complete(uint64_t leaseId)
{
    const auto it = m_leases.find(leaseId);
    if (it == m_leases.end())
        return Error::make(net::errc::kUnknownLease, "lease " + std::to_string(leaseId) + " is not outstanding");
    const Lease done = it->second;
    m_leases.erase(it);
    if (done.epoch != m_epoch) {
        // Done for the epoch it was leased in; due again in this one.
        m_pool.push_back(done.range);
        return Status::success();
    }
    return markCompleted(done.range);
}

Status DataPlan::completeRange(uint32_t range)
{
    if (range >= m_ranges.size() || m_completed[range])
        return Error::make(net::errc::kUnknownRange, "range " + std::to_string(range) + " is not open in this epoch");
    for (auto it = m_leases.begin(); it != m_leases.end(); ++it)
        if (it->second.range == range) {
            m_leases.erase(it);
            break;
        }
    std::erase(m_pool, range);
    return markCompleted(range);
}

Status DataPlan::markCompleted(uint32_t range)
{
    m_completed[range] = true;
    ++m_completedCount;
    if (m_completedCount == m_ranges.size())
        startEpoch();
    return Status::success();
}

void DataPlan::startEpoch()
{
    ++m_epoch;
    m_completed.assign(m_ranges.size(), false);
    m_completedCount = 0;
    // Ranges still leased in the old epoch join this one's pool when their
    // leases end (complete() or releaseLease()).
    refillPool();
}

bool DataPlan::canLease() const
{
    return !m_pool.empty() || m_leases.size() < m_ranges.size();
}

bool DataPlan::releaseLease(uint64_t leaseId)
{
    const auto it = m_leases.find(leaseId);
    if (it == m_leases.end())
        return false;
    // To the front: data that was due goes out next rather than at the end
    // of the epoch. A lease of an earlier epoch missed that one; its range
    // is due in this one and was never in this pool.
    m_pool.push_front(it->second.range);
    m_leases.erase(it);
    return true;
}

std::vector<Lease> DataPlan::release(const std::string& publicKey)
{
    std::vector<Lease> released;
    for (const auto& [id, lease] : m_leases) {
        if (lease.publicKey == publicKey)
            released.push_back(lease);
    }
    for (auto it = released.rbegin(); it != released.rend(); ++it)
        releaseLease(it->id);
    return released;
}

std::vector<Lease> DataPlan::expire(int64_t nowMs)
{
    std::vector<Lease> expired;
    for (const auto& [id, lease] : m_leases) {
        if (lease.deadlineMs <= nowMs)
            expired.push_back(lease);
    }
    for (auto it = expired.rbegin(); it != expired.rend(); ++it)
        releaseLease(it->id);
    return expired;
}

std::optional<Lease> DataPlan::findLease(uint64_t leaseId) const
{
    const auto it = m_leases.find(leaseId);
    return it == m_leases.end() ? std::nullopt : std::optional<Lease>(it->second);
}

std::vector<engine::ShardSlice> DataPlan::slicesOf(const Lease& lease, const engine::DataSet& data)
{
    std::vector<engine::ShardSlice> slices;
    for (const Piece& piece : lease.pieces) {
        if (piece.shard >= data.train.size())
            return {};
        slices.push_back(engine::ShardSlice{&data.train[piece.shard], piece.begin, piece.end});
    }
    return slices;
}

uint64_t DataPlan::fingerprint() const
{
    std::string bytes;
    putU64(bytes, m_pieceTokens);
    putU64(bytes, m_seed);
    for (const std::vector<Piece>& range : m_ranges) {
        putU32(bytes, uint32_t(range.size()));
        for (const Piece& piece : range) {
            putU32(bytes, piece.shard);
            putU64(bytes, piece.begin);
            putU64(bytes, piece.end);
        }
    }
    return fnv1a(kFnvOffset, bytes);
}

std::string DataPlan::serialize() const
{
    std::string out(kMagic, sizeof kMagic);
    putU32(out, kFormatVersion);
    putU32(out, 0);
    putU64(out, fingerprint());
    putU64(out, m_epoch);
    putU64(out, m_nextLeaseId);
    putU64(out, m_ranges.size());
    std::string bits((m_ranges.size() + 7) / 8, '\0');
    for (std::size_t i = 0; i < m_ranges.size(); ++i) {
        if (m_completed[i])
            bits[i / 8] = char(uint8_t(bits[i / 8]) | (1u << (i % 8)));
    }
    out += bits;
    putU64(out, fnv1a(kFnvOffset, out));
    return out;
}

Status DataPlan::restore(std::string_view blob)
{
    if (blob.size() < kHeaderBytes + 8 || std::memcmp(blob.data(), kMagic, sizeof kMagic) != 0)
        return badBlob("is not a data plan");
    if (getU32(blob, 8) != kFormatVersion)
        return badBlob("has unknown format version " + std::to_string(getU32(blob, 8)));
    if (fnv1a(kFnvOffset, blob.substr(0, blob.size() - 8)) != getU64(blob, blob.size() - 8))
        return badBlob("is damaged (checksum mismatch)");
    const uint64_t count = getU64(blob, 40);
    if (count != m_ranges.size() || getU64(blob, 16) != fingerprint())
        return badBlob("was written for other train shards, task shape or seed (" + std::to_string(count)
            + " ranges, now " + std::to_string(m_ranges.size()) + ")");
    if (blob.size() != kHeaderBytes + (count + 7) / 8 + 8)
        return badBlob("has the wrong size");
    m_epoch = getU64(blob, 24);
    m_nextLeaseId = std::max(m_nextLeaseId, getU64(blob, 32));
    m_completedCount = 0;
    for (std::size_t i = 0; i < count; ++i) {
        m_completed[i] = (uint8_t(blob[kHeaderBytes + i / 8]) >> (i % 8)) & 1u;
        m_completedCount += m_completed[i] ? 1 : 0;
    }
    // Leases of the lost round are gone: their ranges are simply not completed.
    m_leases.clear();
    if (m_completedCount == count)
        startEpoch();
    else
        refillPool();
    return Status::success();
}

} // namespace crowdtrain::coordinator
