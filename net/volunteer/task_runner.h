#pragma once

// Runs one task's H inner steps on a training thread of its own while the
// caller's thread keeps the session alive (heartbeats, re-joins) and watches
// for the round to wrap up or close. The training thread owns shares of
// what it reads (the trainer and the theta_v snapshot), so nothing it uses
// can be freed under it by a re-join that changes the model; it is started
// and joined by a scoped owner, so no path leaves it running.
//
// One owner (AgentLoop), used on run()'s thread only.

#include "engine/gpt_config.h"
#include "net/volunteer/agent.h"
#include "net/volunteer/core_trainer.h"
#include "net/volunteer/range_source.h"
#include "net/volunteer/reporter.h"
#include "net/volunteer/session.h"
#include "net/volunteer/theta_sync.h"

#include <filesystem>
#include <functional>
#include <memory>

namespace crowdtrain::volunteer {

// Where and how the task's batch trains: the devices (options.devices when
// it lists two or more that the training core reports, `coreDevices` from
// its hello, else options.device), data parallel or ZeRO-3 between them,
// and the micro-batch, all under the GPU memory budget of each device
// (net/limits/memory.h: no budget, or the CPU: the whole share at once); the
// core holds its allocator to the budget. Error "bad_options" when not even
// one sequence fits.
Result<TrainingDevices> trainingDevicesFor(const AgentOptions& options, const engine::GptConfig& model,
    const net::InnerSettings& inner, const std::vector<std::string>& coreDevices);

// The wire manifest of engine::Gpt(model) (names and shapes in flat-vector
// order), to compare with the coordinator's; computed, never built.
std::vector<net::TensorSpec> wireManifestOf(const engine::GptConfig& model);

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
    TaskRunner(const AgentOptions& options, CoreHost& core, const std::filesystem::path& scratchDir, Session& session,
        Reporter& reporter, const std::atomic<bool>& stop);

    // The project's model and inner settings (the core builds a new trainer,
    // its optimizer state empty, when they change).
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
    CoreHost& m_core;
    Session& m_session;
    Reporter& m_reporter;
    const std::atomic<bool>& m_stop;
    engine::GptConfig m_model;
    net::InnerSettings m_inner;
    uint64_t m_generation = 0; // counts changes of model or inner settings
    std::shared_ptr<CoreTrainer> m_trainer;
    std::vector<std::string> m_lastTeam;
};

} // namespace crowdtrain::volunteer
