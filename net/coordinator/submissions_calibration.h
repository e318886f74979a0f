#pragma once

// The host's own calibration of the submission gate (spec `trust.calibrate`,
// docs/architecture.md "Trust and Sybils"): in a project that names no
// trusted key, nothing but keys would set the gate's norm reference, and
// keys are free. So the coordinator trains one task itself at each version,
// as a volunteer would (the project's inner settings, H steps from theta_v,
// one AdamW state kept across tasks, a sparse project's error-feedback
// buffer likewise), on random training windows nobody else picks, and
// measures its pseudo-gradient as the gate measures a submission (the norm
// of the message; int8: the cosine with the outer momentum). The gate
// counts that measure as the sample of a key the host names: an attacker
// cannot move it, whatever the number of its keys.
//
// The task runs on a thread of its own (one torch thread, at the loop's
// priority), so the loop never waits for it but at the project's start
// (take(true)): until the next measure is ready the gate keeps the last one.
// A task runs to its end even when newer versions come meanwhile (it was
// stopped at each one: on a busy host no task ever finished, and the
// measure of version 0 judged round 40); the newest of them trains next.
//
// Costs one task's training per round on the coordinator's CPU: meant for
// small models (or a host with a GPU); a large project names trusted keys
// (`trust.keys`) instead.
//
// start() and take() from one thread (the server's loop).

#include "core/result.h"
#include "engine/data_set.h"
#include "engine/diloco/sparse_codec.h"
#include "net/coordinator/project_spec.h"

#include <atomic>
#include <future>
#include <memory>
#include <optional>
#include <vector>

namespace crowdtrain::coreservice {
class InnerTrainer;
}

namespace crowdtrain::coordinator {

class HostCalibration {
public:
    struct Measure {
        int64_t version = 0;
        double norm = 0;
        std::optional<double> cosine; // with the outer momentum, when it has a direction
    };

    // `sparse`: the layout of a sparse project (outlives this), else null.
    HostCalibration(const ProjectSpec& spec, int64_t parameters, const diloco::SparseLayout* sparse);
    ~HostCalibration(); // stops a task in progress and waits for it
    HostCalibration(const HostCalibration&) = delete;
    HostCalibration& operator=(const HostCalibration&) = delete;

    // Trains the task of `version` from `theta`; `direction` is the outer
    // momentum (empty or zero: no cosine). With a task still in progress,
    // this one trains once it is taken (replacing any other waiting).
    void start(int64_t version, std::shared_ptr<const std::vector<float>> theta, std::vector<float> direction);
    // The measure of the task in progress, once, when it is done (or, with
    // `wait`, once it is); the waiting task, if any, then starts. A failed
    // task (the data cannot be read, libtorch threw) gives nothing and is
    // logged; the gate then keeps the last one.
    std::optional<Measure> take(bool wait = false);
    bool running() const { return m_running.valid(); }

private:
    struct Task {
        int64_t version = 0;
        std::shared_ptr<const std::vector<float>> theta;
        std::vector<float> direction;
    };
    void launch(Task task);

    Result<Measure> train(int64_t version, const std::vector<float>& theta, const std::vector<float>& direction);

    const ProjectSpec& m_spec;
    const diloco::SparseLayout* m_sparse;
    std::optional<engine::DataSet> m_data;
    std::unique_ptr<coreservice::InnerTrainer> m_trainer;
    std::vector<float> m_errorBuffer; // a sparse project's, kept across tasks as a volunteer keeps it
    uint64_t m_seed; // drawn at each start: windows nobody can predict
    uint64_t m_tasks = 0;
    std::atomic<bool> m_abort{false};
    std::atomic<bool> m_wrapUp{false};
    std::future<Result<Measure>> m_running;
    std::optional<Task> m_next; // the newest version's, while one trains
};

} // namespace crowdtrain::coordinator
