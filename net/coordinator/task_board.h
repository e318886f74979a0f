#pragma once

// Task leasing for one project's open round: which volunteer holds which
// data range, the upload each task has received so far, and the durable
// record of every open task (STATE/<project>/tasks/t<id>.json, written
// before the volunteer hears of its task and removed when the task ends), so
// that a coordinator restart keeps the work in flight. The records are
// written and files removed on a thread of the board's own, in order: a
// round's close writing GBs can hold a small fsync or an unlink for a while,
// and the loop must not wait (the caller replies once `recorded` is ready). Task ids are lease
// ids of the DataPlan, reserved in blocks in the ledger's meta table so that
// no id is ever issued twice, across restarts too.
//
// Leasing rules: one open task per key; a task ends when its submission is
// accepted (forget) or refused, its holder leaves or goes silent, or its
// deadline passes (drop). What a round may hand out is the caller's rule.
//
// Used from one thread (the server's loop).

#include "engine/diloco/codec.h"
#include "engine/diloco/sparse_codec.h"
#include "net/coordinator/data_plan.h"
#include "net/coordinator/payload_sketch.h"
#include "net/coordinator/project_worker.h"
#include "net/coordinator/state_store.h"
#include "net/transfer/sha256.h"

#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string_view>

namespace crowdtrain::coordinator {

// The checks that read a payload (SHA-256, finiteness, norm, direction,
// and for a sparse message its bits and its sketch) run on each chunk as it
// arrives, so that submit does not read it again: the loop's work per chunk
// is bounded by the chunk's size, whatever the model's.
struct UploadChecks {
    // sparse: the project's layout (it outlives the checks), or null for a
    // dense codec.
    UploadChecks(diloco::Codec codec, int64_t n, const float* direction, const diloco::SparseLayout* sparse)
        : inspector(codec, n, sparse ? nullptr : direction)
    {
        if (sparse) {
            sparseInspector.emplace(*sparse, direction);
            sketch = PayloadSketch::sparseZero();
        }
    }
    void feed(std::string_view piece)
    {
        if (!inspected)
            return;
        if (!sparseInspector) {
            inspected = inspector.feed(piece);
            return;
        }
        inspected = sparseInspector->feed(piece, [this](const int64_t* position, const float* value, int64_t count) {
            sketch.addSparse(position, value, count);
        });
    }
    void dropReference()
    {
        inspector.dropReference();
        if (sparseInspector)
            sparseInspector->dropReference();
    }
    bool referenceDropped() const
    {
        return sparseInspector ? sparseInspector->referenceDropped() : inspector.referenceDropped();
    }

    net::Sha256 sha;
    diloco::StreamInspector inspector; // a dense codec's
    std::optional<diloco::SparseStreamInspector> sparseInspector;
    PayloadSketch sketch; // a sparse message's, as its entries come
    Status inspected; // the first error the inspector reported
};

struct OpenTask {
    Lease lease;
    uint64_t tokens = 0; // the task's training tokens (H * B * T)
    uint64_t receivedBytes = 0;
    uint64_t nextChunk = 0;
    std::filesystem::path uploadFile;
    std::shared_ptr<UploadChecks> checks; // of the chunks received so far
    int64_t lastUploadMs = 0; // when its last chunk came (0: none yet)
    int64_t firstUploadMs = 0; // when its first chunk came (0: none yet)
    // Leased for the round after the open one (get_task "ahead"): its holder
    // trains it while the open round closes; it counts toward no round's
    // target until that round opens (promoteAhead).
    bool ahead = false;
    int64_t leasedMs = 0; // when it was leased (0: restored at a restart)
    // Its submission passed the checks and is being made durable on the
    // project's worker (Submissions): drop() leaves it be.
    bool accepting = false;
    // While its record is being written: its holder hears of it once this
    // is ready and succeeded (a restored task has none).
    std::shared_future<Status> recorded = {};
};

class TaskBoard {
public:
    // `beforeRecord`, when set, runs on the board's thread before each
    // record is written (the crash and stall tests' fault point).
    TaskBoard(ProjectStore& store, DataPlan& plan, uint64_t taskTokens, std::function<void()> beforeRecord = {});

    // Creates the folders and continues above the reserved lease ids.
    Status open();

    // Leases the next range to `key` for `round` (ahead: for the round
    // after it) and starts writing its record (the task's `recorded`);
    // nullptr when the plan has no range to hand out.
    Result<OpenTask*> lease(const std::string& key, int64_t round, int64_t nowMs, bool ahead = false);
    // Waits for the task's record to be written, clears `recorded` and
    // returns how the write went (success for a task without one); after a
    // failure the caller ends the task.
    Status settleRecord(uint64_t taskId);
    OpenTask* find(uint64_t taskId, const std::string& key); // the key's task of that id, if open
    const OpenTask* heldBy(const std::string& key) const; // its task for the open round
    const OpenTask* aheadHeldBy(const std::string& key) const; // its task leased ahead
    std::vector<uint64_t> idsHeldBy(const std::string& key) const;

    // Ends a task that was not accepted: its upload is deleted, its range goes
    // back to the pool when `returnRange` (an expired lease is back already).
    // A task `accepting` is not dropped: its acceptance ends it.
    void drop(uint64_t taskId, bool returnRange);
    // Ends an accepted task (its upload was moved away, its range completed).
    void forget(uint64_t taskId);
    // How long `key`'s task accepted in the open round took from its lease
    // to its first upload chunk: the time that volunteer needs to train a
    // whole task and start sending it. 0 when unknown (none accepted, or
    // one restored at a restart).
    int64_t paceOf(const std::string& key) const;
    // The tasks past their deadline; the plan has taken their ranges back,
    // drop(id, false) ends them.
    std::vector<uint64_t> expire(int64_t nowMs);

    bool empty() const { return m_tasks.empty(); }
    uint64_t outstandingTokens() const; // of the open round's tasks
    uint64_t aheadTokens() const;
    // At a round's close: the tasks leased ahead become the new open round's
    // (their records name it already). A key that still holds a task of the old round
    // beside one leased ahead has moved past it: that task is dropped (its
    // range back to the pool). Returns the dropped ids.
    std::vector<uint64_t> promoteAhead();
    const std::map<uint64_t, OpenTask>& tasks() const { return m_tasks; }

    // After a restart: the recorded tasks of `round` come back with their
    // ids, ranges, holders and deadlines; `resume` restores each upload.
    // Other records and upload files are removed.
    Status restore(int64_t round, const std::function<Status(OpenTask&)>& resume);

private:
    Status reserveLeaseId();
    std::shared_future<Status> record(const OpenTask& task, int64_t round);
    // Removes files on the board's thread, after the writes posted before.
    void removeLater(std::vector<std::filesystem::path> files);
    std::filesystem::path tasksDir() const;
    std::filesystem::path uploadsDir() const;
    std::filesystem::path uploadFileOf(uint64_t taskId) const;

    ProjectStore& m_store;
    DataPlan& m_plan;
    uint64_t m_taskTokens;
    std::map<uint64_t, OpenTask> m_tasks; // by task id (= lease id)
    std::map<std::string, int64_t> m_paceMs; // paceOf, by key; cleared as a round opens
    // Lease ids below this are (or may have been) handed out; it is stored in
    // the ledger's meta table a block ahead, so a restart never reuses an id.
    uint64_t m_leaseIdCeiling = 0;
    std::function<void()> m_beforeRecord;
    // Writes the records and removes files (last: destroyed, so joined,
    // first, after finishing what was posted).
    std::unique_ptr<ProjectWorker> m_files = std::make_unique<ProjectWorker>("task-files");
};

} // namespace crowdtrain::coordinator
