#pragma once

// One task's inner steps, trained by the training core (core_host.h,
// docs/protocol.md §13.2): the daemon writes the task's windows and theta to
// files under the project's folder (core/), sends "train", answers each
// step's report with go / wrap_up / abort once the governor's rest or a
// pause is over, and reads the local weights the core wrote. Everything the
// core says is checked: a core that dies, stops reporting steps for longer
// than the step deadline, or sends what is not a frame is ended, and the
// task fails with "core_failed" / "core_hung" (the agent drops the task and
// tries again after its backoff, with a new core).
//
// Used by one thread at a time (TaskRunner's training thread).

#include "net/core_link/core_messages.h"
#include "net/volunteer/core_host.h"
#include "net/wire/messages_common.h"

#include "engine/batch_source.h"

#include <atomic>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

namespace crowdtrain::volunteer {

using corelink::TaskOutcome;
using corelink::TrainingDevices;

struct CoreTaskRequest {
    uint64_t taskId = 0;
    net::ModelConfig model;
    net::InnerSettings inner;
    TrainingDevices devices;
    uint64_t threads = 0;
    uint64_t steps = 0;
    uint64_t firstGlobalStep = 0;
    uint64_t memoryBudgetBytes = 0;
    uint64_t memoryTotalBytes = 0;
};

struct CoreTrainerOptions {
    std::filesystem::path scratchDir; // <project>/core: theta, windows and local weights for the core
    // A step may take this long, or 10 times the slowest step seen, before
    // the core counts as hung; the first step also has loadTimeoutMs for
    // building the model.
    int stepTimeoutMs = 120000;
    int loadTimeoutMs = 600000;
};

// Reads outcome.localFile into outcome.local (a task leased ahead moves its
// weights in memory). Errors: FloatFileReader's.
Status loadLocalWeights(TaskOutcome& outcome, uint64_t elements);

class CoreTrainer {
public:
    CoreTrainer(CoreHost& host, CoreTrainerOptions options);

    // Trains from `theta` (its SHA-256 names the copy kept for the core;
    // empty: always written again) on `source`'s next windows. The outcome's
    // local weights stay in the core's file (TaskOutcome::localFile) until
    // the next run; loadLocalWeights() reads them whole. onStep is
    // called after each step on this thread and may block (the governor's
    // rest, a pause); `release` is read after it: set, the task wraps up
    // with the steps done so that the core can exit.
    Result<TaskOutcome> run(const CoreTaskRequest& request, const std::vector<float>& theta,
        const std::string& thetaSha256, engine::BatchSource& source, const std::atomic<bool>& abort,
        const std::atomic<bool>& wrapUp, const std::function<bool()>& release,
        const std::function<void(const corelink::StepDone&)>& onStep);

    // The same from theta_v in a file (a spilled theta: P float32 whose
    // SHA-256 is thetaSha256), copied for the core file to file.
    Result<TaskOutcome> run(const CoreTaskRequest& request, const std::filesystem::path& thetaFile,
        const std::string& thetaSha256, engine::BatchSource& source, const std::atomic<bool>& abort,
        const std::atomic<bool>& wrapUp, const std::function<bool()>& release,
        const std::function<void(const corelink::StepDone&)>& onStep);

    // What the core said at the last task's start.
    const corelink::TrainStarted& started() const { return m_started; }

private:
    Result<TaskOutcome> exchange(CoreHost::Lease& lease, const CoreTaskRequest& request, uint64_t elements,
        const std::atomic<bool>& abort, const std::atomic<bool>& wrapUp, const std::function<bool()>& release,
        const std::function<void(const corelink::StepDone&)>& onStep);
    Status writeTheta(const std::vector<float>& theta, const std::string& sha256);
    Status copyTheta(const std::filesystem::path& file, const std::string& sha256);
    Result<TaskOutcome> start(const CoreTaskRequest& request, uint64_t elements, engine::BatchSource& source,
        const std::function<Status()>& writeTheta, const std::atomic<bool>& abort, const std::atomic<bool>& wrapUp,
        const std::function<bool()>& release, const std::function<void(const corelink::StepDone&)>& onStep);

    CoreHost& m_host;
    CoreTrainerOptions m_options;
    std::string m_thetaSha256; // of the theta file written last ("" unknown)
    corelink::TrainStarted m_started;
    double m_slowestStepMs = 0;
};

} // namespace crowdtrain::volunteer
