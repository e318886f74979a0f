// The data plan: ranges cover the shards, every range is leased exactly once
// per epoch, released and expired ranges come back, epochs roll over with a
// new order, and progress survives serialization.
#include "coordinator_fixtures.h"

#include "net/coordinator/data_plan.h"

#include <QTemporaryDir>
#include <QTest>

#include <algorithm>
#include <set>

using namespace crowdtrain;
using namespace crowdtrain::coordinator;

namespace {

using testing::orFail;

// Leases everything available, round-robin over a few keys.
std::vector<Lease> leaseAll(DataPlan& plan, int64_t nowMs = 0)
{
    std::vector<Lease> leases;
    const char* keys[] = {"a", "b", "c"};
    while (auto lease = plan.lease(keys[leases.size() % 3], nowMs))
        leases.push_back(*lease);
    return leases;
}

} // namespace

class TestDataPlan : public QObject {
    Q_OBJECT

private slots:
    void rangesCoverEachTokenOnce()
    {
        // Stride 99: the last target of a range is the first input of the next.
        DataPlan plan = orFail(DataPlan::create({1000, 250, 99}, 100, 1, 1000));
        QCOMPARE(plan.rangeCount(), std::size_t(10 + 2)); // the 99-token shard holds none
        const auto leases = leaseAll(plan);
        std::map<uint32_t, std::vector<std::pair<uint64_t, uint64_t>>> byShard;
        for (const Lease& l : leases) {
            QCOMPARE(l.pieces.size(), std::size_t(1));
            QCOMPARE(l.pieces[0].end - l.pieces[0].begin, uint64_t(100));
            byShard[l.pieces[0].shard].push_back({l.pieces[0].begin, l.pieces[0].end});
        }
        QCOMPARE(byShard.size(), std::size_t(2));
        for (auto& [shard, ranges] : byShard) {
            std::sort(ranges.begin(), ranges.end());
            QCOMPARE(ranges.front().first, uint64_t(0));
            for (std::size_t i = 1; i < ranges.size(); ++i)
                QCOMPARE(ranges[i].first, ranges[i - 1].second - 1);
            QVERIFY(ranges.back().second <= (shard == 0 ? 1000u : 250u));
        }
    }

    void rangesGatherPiecesFromAllOverTheData()
    {
        // 2 shards of 100 pieces of 11 tokens (stride 10); ranges of 8 pieces.
        DataPlan plan = orFail(DataPlan::create({1001, 1001}, 11, 7, 1000, 8));
        QCOMPARE(plan.rangeCount(), std::size_t(200 / 8));
        std::set<std::pair<uint32_t, uint64_t>> seen;
        std::size_t spread = 0;
        for (const Lease& l : leaseAll(plan)) {
            QCOMPARE(l.pieces.size(), std::size_t(8));
            uint64_t lowest = UINT64_MAX, highest = 0;
            for (const Piece& piece : l.pieces) {
                QCOMPARE(piece.end - piece.begin, uint64_t(11));
                QCOMPARE(piece.begin % 10, uint64_t(0));
                QVERIFY(seen.insert({piece.shard, piece.begin}).second); // each piece in one range
                lowest = std::min(lowest, piece.shard * 1001 + piece.begin);
                highest = std::max(highest, piece.shard * 1001 + piece.begin);
            }
            spread += highest - lowest > 1000 ? 1 : 0;
        }
        QCOMPARE(seen.size(), std::size_t(200));
        QVERIFY(spread > 20); // not contiguous stretches
        // The grouping is a function of the seed: a restarted coordinator agrees.
        DataPlan same = orFail(DataPlan::create({1001, 1001}, 11, 7, 1000, 8));
        QCOMPARE(
            same.lease("x", 0)->pieces, orFail(DataPlan::create({1001, 1001}, 11, 7, 1000, 8)).lease("y", 0)->pieces);
        QVERIFY(same.restore(plan.serialize()).ok());
        DataPlan otherGrouping = orFail(DataPlan::create({1001, 1001}, 11, 7, 1000, 4));
        QVERIFY(!otherGrouping.restore(plan.serialize()).ok());
        QVERIFY(!DataPlan::create({1001}, 11, 7, 1000, 101).ok()); // 100 pieces cannot make a range of 101
        QVERIFY(!DataPlan::create({1001}, 11, 7, 1000, 0).ok());
    }

    void everyRangeOncePerEpoch()
    {
        DataPlan plan = orFail(DataPlan::create({5000, 3000}, 101, 9, 1000));
        const std::size_t n = plan.rangeCount();
        std::vector<uint32_t> firstOrder;
        for (uint64_t epoch = 0; epoch < 3; ++epoch) {
            QCOMPARE(plan.epoch(), epoch);
            const auto leases = leaseAll(plan);
            QCOMPARE(leases.size(), n);
            std::set<uint32_t> ranges;
            std::set<uint64_t> ids;
            for (const Lease& l : leases) {
                ranges.insert(l.range);
                ids.insert(l.id);
                QCOMPARE(l.epoch, epoch);
            }
            QCOMPARE(ranges.size(), n); // no range twice
            QCOMPARE(ids.size(), n);
            QVERIFY(!plan.lease("d", 0)); // nothing left until completions
            std::vector<uint32_t> order;
            for (const Lease& l : leases)
                order.push_back(l.range);
            if (epoch == 0)
                firstOrder = order;
            else
                QVERIFY(order != firstOrder); // each epoch is shuffled anew
            for (std::size_t i = 0; i + 1 < leases.size(); ++i)
                QVERIFY(plan.complete(leases[i].id).ok());
            QCOMPARE(plan.epoch(), epoch);
            QCOMPARE(plan.completedCount(), n - 1);
            QVERIFY(plan.complete(leases.back().id).ok());
            QVERIFY(!plan.complete(leases.back().id).ok()); // not twice
        }
        // The order is a function of (seed, epoch): another plan agrees.
        DataPlan same = orFail(DataPlan::create({5000, 3000}, 101, 9, 1000));
        std::vector<uint32_t> again;
        for (const Lease& l : leaseAll(same))
            again.push_back(l.range);
        QVERIFY(again == firstOrder);
    }

    void nextEpochStartsWhileTheLastRangesAreOut()
    {
        DataPlan plan = orFail(DataPlan::create({5000}, 101, 4, 1000));
        const std::size_t n = plan.rangeCount();
        const auto first = leaseAll(plan);
        QCOMPARE(first.size(), n);
        // Two stragglers hold epoch 0's last ranges; everyone else is done.
        for (std::size_t i = 2; i < n; ++i)
            QVERIFY(plan.complete(first[i].id).ok());
        QCOMPARE(plan.epoch(), uint64_t(0));
        QVERIFY(plan.canLease());
        // A volunteer asking now starts epoch 1 instead of waiting.
        const auto second = leaseAll(plan);
        QCOMPARE(second.size(), n - 2);
        QCOMPARE(plan.epoch(), uint64_t(1));
        std::set<uint32_t> ranges;
        for (const Lease& l : second) {
            QCOMPARE(l.epoch, uint64_t(1));
            ranges.insert(l.range);
        }
        QVERIFY(!ranges.contains(first[0].range)); // never leased twice at once
        QVERIFY(!ranges.contains(first[1].range));
        QVERIFY(!plan.canLease());
        // The stragglers' ranges join epoch 1 when their leases end: one
        // completed (trained in epoch 0, due again), one released (missed).
        QVERIFY(plan.complete(first[0].id).ok());
        QCOMPARE(plan.completedCount(), std::size_t(0)); // an epoch-0 completion
        QVERIFY(plan.releaseLease(first[1].id));
        QCOMPARE(plan.availableCount(), std::size_t(2));
        const Lease a = *plan.lease("late", 0);
        const Lease b = *plan.lease("late", 0);
        QCOMPARE(a.range, first[1].range); // released data goes out first
        QCOMPARE(b.range, first[0].range);
        QCOMPARE(a.epoch, uint64_t(1));
        // Epoch 1 then completes with every range exactly once.
        for (const Lease& l : second)
            QVERIFY(plan.complete(l.id).ok());
        QVERIFY(plan.complete(a.id).ok());
        QCOMPARE(plan.epoch(), uint64_t(1));
        QVERIFY(plan.complete(b.id).ok());
        QCOMPARE(plan.epoch(), uint64_t(2));
        QCOMPARE(plan.availableCount(), n);
    }

    void releaseReturnsRanges()
    {
        DataPlan plan = orFail(DataPlan::create({2000}, 101, 3, 1000));
        const std::size_t n = plan.rangeCount();
        std::vector<Lease> alice;
        for (int i = 0; i < 3; ++i)
            alice.push_back(*plan.lease("alice", 0));
        const Lease bob = *plan.lease("bob", 0);
        QCOMPARE(plan.availableCount(), n - 4);
        const auto released = plan.release("alice");
        QCOMPARE(released.size(), std::size_t(3));
        QCOMPARE(plan.availableCount(), n - 1);
        QCOMPARE(plan.leasedCount(), std::size_t(1));
        QCOMPARE(plan.complete(alice[0].id).error().code, std::string("unknown_lease"));
        // Released data goes out next.
        std::set<uint32_t> expected;
        for (const Lease& l : alice)
            expected.insert(l.range);
        std::set<uint32_t> next;
        for (int i = 0; i < 3; ++i)
            next.insert(plan.lease("carol", 0)->range);
        QCOMPARE(next, expected);
        QVERIFY(plan.releaseLease(bob.id));
        QVERIFY(!plan.releaseLease(bob.id));
        QVERIFY(plan.release("nobody").empty());
    }

    void expiredLeasesReturn()
    {
        DataPlan plan = orFail(DataPlan::create({2000}, 101, 3, 1000));
        const Lease early = *plan.lease("a", 0);
        const Lease late = *plan.lease("b", 500);
        QCOMPARE(early.deadlineMs, int64_t(1000));
        QVERIFY(plan.expire(999).empty());
        const auto expired = plan.expire(1000);
        QCOMPARE(expired.size(), std::size_t(1));
        QCOMPARE(expired[0].id, early.id);
        QVERIFY(plan.findLease(late.id));
        QVERIFY(!plan.findLease(early.id));
        QCOMPARE(plan.lease("c", 1000)->range, early.range);
    }

    void persistenceRoundTrip()
    {
        DataPlan plan = orFail(DataPlan::create({3000, 1000}, 101, 5, 1000));
        const std::size_t n = plan.rangeCount();
        // Finish epoch 0, then complete a few of epoch 1 and lease some more.
        for (const Lease& l : leaseAll(plan))
            QVERIFY(plan.complete(l.id).ok());
        std::set<uint32_t> done;
        uint64_t lastId = 0;
        for (int i = 0; i < 7; ++i) {
            const Lease l = *plan.lease("a", 0);
            done.insert(l.range);
            QVERIFY(plan.complete(l.id).ok());
        }
        for (int i = 0; i < 4; ++i)
            lastId = plan.lease("b", 0)->id; // outstanding when the coordinator dies
        const std::string blob = plan.serialize();

        DataPlan restored = orFail(DataPlan::create({3000, 1000}, 101, 5, 1000));
        QVERIFY(restored.restore(blob).ok());
        QCOMPARE(restored.epoch(), uint64_t(1));
        QCOMPARE(restored.completedCount(), std::size_t(7));
        QCOMPARE(restored.leasedCount(), std::size_t(0));
        QCOMPARE(restored.availableCount(), n - 7); // the 4 lost leases are back in the pool
        std::vector<Lease> rest;
        for (std::size_t i = 0; i < n - 7; ++i)
            rest.push_back(*restored.lease("c", 0));
        for (const Lease& l : rest) {
            QCOMPARE(l.epoch, uint64_t(1));
            QVERIFY(!done.contains(l.range));
            QVERIFY(l.id > lastId); // ids never repeat across restarts
        }
        QCOMPARE(restored.serialize().size(), blob.size());
    }

    // A lease handed out after the last commit comes back after a restart
    // with its range; anything that no longer fits is refused and changes nothing.
    void leasesAreRestoredAfterARestart()
    {
        DataPlan plan = orFail(DataPlan::create({3000, 1000}, 101, 5, 1000));
        const Lease done = *plan.lease("a", 0);
        QVERIFY(plan.complete(done.id).ok());
        const std::string blob = plan.serialize(); // the commit
        const Lease open = *plan.lease("b", 0);
        const Lease other = *plan.lease("c", 0);

        DataPlan restored = orFail(DataPlan::create({3000, 1000}, 101, 5, 1000));
        QVERIFY(restored.restore(blob).ok());
        restored.skipLeaseIdsBelow(other.id + 1);
        const std::size_t available = restored.availableCount();
        auto back = restored.restoreLease(Lease{open.id, "b", open.epoch, open.range, {}, 777});
        QVERIFY(back.ok());
        QCOMPARE(back->pieces, open.pieces);
        QCOMPARE(back->deadlineMs, int64_t(777));
        QCOMPARE(restored.availableCount(), available - 1);
        QCOMPARE(restored.findLease(open.id)->publicKey, std::string("b"));
        // Refused: the same range again, a completed range, another epoch, an
        // id that was never handed out.
        QVERIFY(!restored.restoreLease(Lease{other.id, "c", open.epoch, open.range, {}, 0}).ok());
        QVERIFY(!restored.restoreLease(Lease{other.id, "c", done.epoch, done.range, {}, 0}).ok());
        QVERIFY(!restored.restoreLease(Lease{other.id, "c", other.epoch + 1, other.range, {}, 0}).ok());
        QVERIFY(!restored.restoreLease(Lease{other.id + 1, "c", other.epoch, other.range, {}, 0}).ok());
        QCOMPARE(restored.availableCount(), available - 1);
        QVERIFY(restored.restoreLease(Lease{other.id, "c", other.epoch, other.range, {}, 0}).ok());
        // Handed-out ids continue above the restored ones, and no range is out twice.
        const Lease next = *restored.lease("d", 0);
        QVERIFY(next.id > other.id);
        QVERIFY(next.range != open.range && next.range != other.range && next.range != done.range);
        QCOMPARE(restored.expire(999).size(), std::size_t(2)); // the restored deadlines count
    }

    void restoreRefusesOtherPlans()
    {
        DataPlan plan = orFail(DataPlan::create({3000}, 101, 5, 1000));
        const std::string blob = plan.serialize();
        DataPlan otherShards = orFail(DataPlan::create({3000, 500}, 101, 5, 1000));
        QCOMPARE(otherShards.restore(blob).error().code, std::string("bad_data_plan"));
        DataPlan otherTask = orFail(DataPlan::create({3000}, 201, 5, 1000));
        QVERIFY(!otherTask.restore(blob).ok());
        DataPlan otherSeed = orFail(DataPlan::create({3000}, 101, 6, 1000));
        QVERIFY(!otherSeed.restore(blob).ok());
        std::string damaged = blob;
        damaged[damaged.size() / 2] = char(damaged[damaged.size() / 2] ^ 1);
        QVERIFY(!plan.restore(damaged).ok());
        QVERIFY(!plan.restore(blob.substr(0, 20)).ok());
        QVERIFY(!plan.restore("").ok());
        QVERIFY(plan.restore(blob).ok());
    }

    void badArguments()
    {
        QVERIFY(!DataPlan::create({50, 60}, 100, 1, 1000).ok()); // no shard holds a range
        QVERIFY(!DataPlan::create(std::vector<uint64_t>{}, 100, 1, 1000).ok());
        QVERIFY(!DataPlan::create({1000}, 1, 1, 1000).ok());
        QVERIFY(!DataPlan::create({1000}, 100, 1, 0).ok());
    }

    void slicesPointIntoTheDataSet()
    {
        QTemporaryDir dir;
        const std::filesystem::path root = dir.path().toStdString();
        testing::makeDataFolder(root, 16, {300, 500});
        const engine::DataSet data = orFail(engine::openDataSet(root));
        DataPlan plan = orFail(DataPlan::create(data, 65, 1, 1000));
        QCOMPARE(plan.rangeCount(), std::size_t(4 + 7));
        for (const Lease& l : leaseAll(plan)) {
            const std::vector<engine::ShardSlice> slices = DataPlan::slicesOf(l, data);
            QCOMPARE(slices.size(), std::size_t(1));
            QCOMPARE(slices[0].shard, &data.train[l.pieces[0].shard]);
            QCOMPARE(slices[0].end - slices[0].begin, uint64_t(65));
            // A task's batches come from exactly this slice.
            auto sampler = engine::BatchSampler::create(slices, 8, 1);
            QVERIFY(sampler.ok());
            QCOMPARE(sampler->tokenCount(), uint64_t(65));
        }
        Lease foreign;
        foreign.pieces = {Piece{7, 0, 65}};
        QVERIFY(DataPlan::slicesOf(foreign, data).empty());
    }
};

QTEST_GUILESS_MAIN(TestDataPlan)
#include "tst_data_plan.moc"
