#pragma once

// Uploads and acceptance for one project's open round: the chunks of each
// task's pseudo-gradient (checked as they arrive), the checks a submit must
// pass (round, shape, chunks, tokens, SHA-256, finiteness, the gate), the
// durable acceptance (payload fsynced and renamed under pending/, its JSON
// record written atomically, its ledger row, only then the aggregate and the
// reply), rejections recorded against their sender, the answer to a submit
// sent again after its reply was lost, and the replay of pending/ after a
// restart.
//
// The gate (diloco::NormGate, docs/architecture.md "The submission gate"):
// norm floor and ceiling, within [1/4, 4] x the median over keys, and a
// cosine with the outer momentum at least 1/4 of the keys' median once that
// says something. Its statistics of the closed round go into the state file
// (gateRecord()), so a restart keeps it as strict.
//
// Used from one thread (the server's loop).

#include "engine/diloco/aggregator.h"
#include "net/coordinator/round_state.h"
#include "net/coordinator/task_board.h"
#include "net/wire/messages.h"

#include <filesystem>
#include <functional>

namespace crowdtrain::coordinator {

class Submissions {
public:
    // `endTask(id)`: ends a refused task (its range back to the pool).
    // `sparse`: the layout of a sparse project (outlives this), else null;
    // its payloads are checked whole at submit, not chunk by chunk.
    Submissions(const ProjectSpec& spec, diloco::Codec codec, int64_t parameters, const diloco::SparseLayout* sparse,
        ProjectStore& store, DataPlan& plan, TaskBoard& tasks, RoundState& round,
        std::function<void(uint64_t)> endTask);

    // Creates pending/, restores the gate from the state file's bytes and
    // the round's direction from the outer momentum.
    Status open(const std::string& gateRecord);
    // After a restart: the accepted submissions of the open round, in the
    // order they were accepted; anything of another round is removed.
    Status replayPending();
    // Re-reads the whole chunks of a task's upload after a restart.
    Status resumeUpload(OpenTask& task);

    Result<net::UploadChunkReply> uploadChunk(
        const std::string& key, const net::UploadChunkRequest& request, int64_t nowMs);
    Result<net::SubmitReply> submit(const std::string& key, const net::SubmitRequest& request, int64_t nowMs);

    // The gate's statistics of the round being closed (for the state file).
    std::string gateRecord() const;
    // The round closed and was committed: pending/ is emptied, the gate and
    // the direction move on.
    void roundClosed();

private:
    Error aheadTooEarly(const OpenTask& task) const;
    Status reject(const std::string& key, const OpenTask& task, const net::SubmitRequest& request, const Error& why,
        int64_t nowMs);
    Result<net::SubmitReply> resubmission(const std::string& key, const net::SubmitRequest& request);
    Result<diloco::PayloadStats> inspectUpload(const OpenTask& task) const;
    int64_t creditedComputeMs(const OpenTask& task, const net::SubmitRequest& request, int64_t nowMs) const;
    Status acceptDurably(
        const std::string& key, const OpenTask& task, const net::SubmitRequest& request, GateStats gate, int64_t nowMs);
    void takeDirection(); // the round's reference direction from the outer momentum
    const float* direction() const { return m_directionNorm > 0 ? m_direction.data() : nullptr; }
    std::filesystem::path pendingDir() const;

    const ProjectSpec& m_spec;
    diloco::Codec m_codec;
    int64_t m_parameters;
    const diloco::SparseLayout* m_sparse;
    uint64_t m_payloadBytes;
    ProjectStore& m_store;
    DataPlan& m_plan;
    TaskBoard& m_tasks;
    RoundState& m_round;
    std::function<void(uint64_t)> m_endTask;
    diloco::NormGate m_gate;
    static constexpr int kStaleDirectionRejections = 8;
    int m_directionRejections = 0; // in the open round, while nothing is accepted
    // The outer momentum as the round opened (norm 0 before the first outer step).
    std::vector<float> m_direction;
    double m_directionNorm = 0;
};

} // namespace crowdtrain::coordinator
