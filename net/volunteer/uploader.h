#pragma once

// A finished task's way to the coordinator: Delta = theta_v - theta_local,
// encoded with the project's codec and error feedback (the residual, kept on
// disk), uploaded in chunks and submitted. The encoded submission is kept
// until the coordinator answers its submit, across reconnects; a submit
// that went out unanswered may have been accepted, so such work is counted
// as unconfirmed rather than dropped when the coordinator no longer knows
// the task.
//
// One owner (AgentLoop), used on run()'s thread only.

#include "engine/diloco/codec.h"
#include "engine/diloco/sparse_codec.h"
#include "net/volunteer/core_trainer.h"
#include "net/volunteer/local_store.h"
#include "net/volunteer/reporter.h"
#include "net/volunteer/session.h"

#include <functional>
#include <optional>

namespace crowdtrain::volunteer {

struct Theta;

// A finished task's encoded pseudo-gradient, kept until the server has
// answered its submit (across reconnects).
struct PendingSubmission {
    net::Task task;
    std::string payload;
    std::string sha256;
    uint64_t tokens = 0;
    double computeMs = 0;
    double meanLoss = 0;
    uint64_t nextChunk = 0;
    // A submit went out and no answer came back (a lost connection, a
    // coordinator killed mid-reply): it may have been accepted.
    bool submitUnanswered = false;
};

class Uploader {
public:
    Uploader(Session& session, const ProjectFolder& folder, Reporter& reporter, const std::atomic<bool>& stop,
        std::function<void(std::vector<float>&)> alterPseudoGradient);

    // The project's codec and size (from a join), and its layout when the
    // codec is sparse (the residual is then its error-feedback buffer). Each
    // take() reads the residual saved by the last one (or an earlier run)
    // when it belongs to the same model (manifestSha256 of the join reply
    // being checked: the session holds it only after), else starts from
    // zeros, and saves it again.
    void configure(diloco::Codec codec, uint64_t elements, const std::string& manifestSha256,
        std::optional<diloco::SparseLayout> sparse = std::nullopt);

    // Encodes the task's pseudo-gradient and keeps it as the pending
    // submission (the residual is saved first). The local weights are read
    // from outcome.localFile a chunk at a time (or taken from outcome.local),
    // theta likewise from theta.file when it was spilled. Errors: "io_error",
    // "bad_size" (the residual on disk is then as it was). It
    // touches no session state, so that it may run beside heartbeats (at
    // GPT-2 size it takes seconds: Session::whileAlive).
    Status take(const net::Task& task, const Theta& theta, const TaskOutcome& outcome);
    bool pending() const { return m_pending.has_value(); }

    // Uploads and submits the pending submission. A verdict (accepted,
    // rejected, dropped as stale) ends it and returns success; connection
    // errors and "cancelled" keep it for the next attempt and are returned.
    Status submit();

    // Elements of Delta formed at a time (4 MB; a multiple of the int8 block).
    static constexpr int64_t kTakeChunkElements = int64_t(1) << 20;

private:
    Result<std::string> encodeSubmission(const Theta& theta, const TaskOutcome& outcome);
    void loadResidual();
    Status reject(const Error& why);
    Status drop(const char* why);

    Session& m_session;
    const ProjectFolder& m_folder;
    Reporter& m_reporter;
    const std::atomic<bool>& m_stop;
    std::function<void(std::vector<float>&)> m_alter;
    diloco::Codec m_codec = diloco::Codec::Int8;
    std::optional<diloco::SparseLayout> m_sparse;
    uint64_t m_elements = 0;
    std::string m_manifestSha256; // the model's, from configure()
    bool m_residualSeen = false; // logged what was found on disk
    std::vector<float> m_residual; // only during take()
    std::optional<PendingSubmission> m_pending;
};

} // namespace crowdtrain::volunteer
