#pragma once

// Runs one task's H inner steps on a training thread of its own while the
// caller's thread keeps the session alive (heartbeats, re-joins) and watches
// for the round to wrap up or close. The training thread owns shares of
// what it reads (the trainer and the theta_v snapshot), so nothing it uses
// can be freed under it by a re-join that changes the model; it is started
// and joined by a scoped owner, so no path leaves it running.
//
// One owner (AgentLoop), used on run()'s thread only.

#include "net/volunteer/agent.h"
#include "net/volunteer/inner_trainer.h"
#include "net/volunteer/range_source.h"
#include "net/volunteer/reporter.h"
#include "net/volunteer/session.h"
#include "net/volunteer/theta_sync.h"

#include <functional>
#include <memory>

namespace crowdtrain::volunteer {

// Where and how the task's batch trains: the devices (options.devices when
// it lists two or more that this libtorch can use, else options.device),
// data parallel or ZeRO-3 between them, and the micro-batch, all under the
// GPU memory budget of each device (net/limits/memory.h: no budget, or the
// CPU: the whole share at once); holds libtorch's CUDA caching allocator to
// the budget where libtorch has CUDA. Error "bad_options" when not even one
// sequence fits.
Result<TrainingDevices> trainingDevicesFor(
    const AgentOptions& options, const engine::GptConfig& model, const net::InnerSettings& inner);

// What the caller does on its own thread while a task trains.
struct RunHooks {
    // Once, just after the training thread started: the last task's upload.
    std::function<void()> whileTraining;
    // For a task leased ahead (its version above theta's): called once when
    // the coordinator has published the task's version, so that the update
    // downloads while the task trains.
    std::function<void()> baseIsOut;
};

class TaskRunner {
public:
    TaskRunner(const AgentOptions& options, Session& session, Reporter& reporter, const std::atomic<bool>& stop);

    // Forgets the trainer (and its optimizer state) when the project's model
    // or inner settings are not the ones it was built for.
    void configure(const engine::GptConfig& model, const net::InnerSettings& inner);

    // Trains `task` from `theta` on `source`; theta may be one version
    // behind the task's (a task leased ahead: the caller moves the outcome
    // onto the task's version afterwards). Errors:
    // "cancelled" (stopped, or the round closed while training: the task
    // is of no use), the trainer's errors ("non_finite", "training_failed", ...).
    Result<TaskOutcome> run(const net::Task& task, std::shared_ptr<const Theta> theta,
        std::unique_ptr<engine::BatchSource> source, const RunHooks& hooks = {});

private:
    const AgentOptions& m_options;
    Session& m_session;
    Reporter& m_reporter;
    const std::atomic<bool>& m_stop;
    engine::GptConfig m_model;
    net::InnerSettings m_inner;
    std::shared_ptr<InnerTrainer> m_trainer;
};

} // namespace crowdtrain::volunteer
