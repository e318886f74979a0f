#include "net/core_service/inner_trainer.h"

#include "engine/diloco/flat_params.h"
#include "engine/host_master.h"
#include "engine/parallel/device_team.h"
#include "net/wire/error_codes.h"

#include "core/file_io.h"

#include <ATen/Parallel.h>
#include <cmath>
#include <fstream>
#include <limits>

namespace crowdtrain::coreservice {

InnerTrainer::InnerTrainer(
    engine::GptConfig model, net::InnerSettings inner, std::string device, int torchThreads, int64_t microBatch)
    : InnerTrainer(
        std::move(model), inner, TrainingDevices{.device = std::move(device), .microBatch = microBatch}, torchThreads)
{ }

InnerTrainer::InnerTrainer(engine::GptConfig model, net::InnerSettings inner, TrainingDevices devices, int torchThreads)
    : m_inner(inner)
    , m_torchThreads(torchThreads)
    , m_devices(std::move(devices))
{
    if (m_devices.team.size() < 2)
        m_devices.team.clear();
    model.dropout = 0.0;
    m_options.model = model;
    const int64_t ranks = std::max<int64_t>(1, int64_t(m_devices.team.size()));
    const int64_t share = std::max<int64_t>(1, int64_t(inner.batchSize) / ranks);
    const int64_t micro = m_devices.microBatch;
    const bool split = micro > 0 && micro < share && share % micro == 0;
    m_options.batchSize = split ? micro : share;
    m_options.gradAccumulationSteps = split ? share / micro : 1;
    m_options.maxIters = int64_t(inner.steps);
    // Each step's rate comes from learningRate(); the trainer's own
    // schedule is not used.
    m_options.schedule.learningRate = inner.learningRate;
    m_options.schedule.minLr = inner.minLr;
    m_options.schedule.decayLr = false;
    m_options.beta1 = inner.beta1;
    m_options.beta2 = inner.beta2;
    m_options.weightDecay = inner.weightDecay;
    m_options.gradClip = inner.gradClip;
    m_options.evalInterval = 0;
    m_options.evalIters = 0;
    m_options.device = m_devices.device;
    // On one device the trainer checkpoints per block itself (a team's
    // ranks do in ParallelTrainer).
    m_options.activationCheckpointing = m_devices.team.empty() && m_devices.activationCheckpointing;
    m_options.int8Moments = m_devices.team.empty() && m_devices.int8Moments;
    m_options.bf16HostMaster = m_devices.team.empty() && m_devices.bf16HostMaster;
}

InnerTrainer::~InnerTrainer() = default;

std::vector<net::TensorSpec> InnerTrainer::wireManifestOf(const engine::GptConfig& model)
{
    engine::GptConfig config = model;
    config.dropout = 0.0;
    torch::NoGradGuard noGrad;
    engine::Gpt gpt(config);
    std::vector<net::TensorSpec> specs;
    for (const auto& entry : diloco::manifestOf(gpt).entries)
        specs.push_back({entry.name, std::vector<uint64_t>(entry.shape.begin(), entry.shape.end())});
    return specs;
}

double InnerTrainer::learningRate(const net::InnerSettings& inner, uint64_t ownStep, uint64_t globalStep)
{
    engine::LrSchedule project;
    project.learningRate = inner.learningRate;
    project.minLr = inner.minLr;
    project.warmupIters = 0;
    project.lrDecayIters = int64_t(std::min<uint64_t>(inner.lrDecayIters, uint64_t(1) << 50));
    project.decayLr = inner.lrDecayIters > 0;
    const double scheduled
        = engine::learningRateAt(int64_t(std::min<uint64_t>(globalStep, uint64_t(1) << 50)), project);
    if (ownStep >= inner.warmupIters)
        return scheduled;
    const double warm = inner.learningRate * double(ownStep + 1) / double(inner.warmupIters + 1);
    return std::min(warm, scheduled);
}

std::string InnerTrainer::deviceName() const
{
    if (m_team) {
        std::string names;
        for (const std::string& d : m_devices.team)
            names += (names.empty() ? "" : ",") + d;
        return names;
    }
    return m_trainer ? m_trainer->device().str() : std::string();
}

std::string InnerTrainer::parallelMode() const
{
    if (m_devices.team.empty())
        return {};
    return m_devices.zeroStage == 3 ? "sharded" : "data_parallel";
}

int64_t InnerTrainer::innerStepsTaken() const
{
    return m_team ? m_team->stepCount() : m_trainer ? m_trainer->stepCount() : 0;
}

int64_t InnerTrainer::rowsPerStep() const
{
    const int64_t ranks = m_devices.team.empty() ? 1 : int64_t(m_devices.team.size());
    return ranks * m_options.batchSize * m_options.gradAccumulationSteps;
}

Status InnerTrainer::prepare(std::unique_ptr<engine::BatchSource> source)
{
    if (!source)
        return Error::make(net::errc::kBadOptions, "no data source for the task");
    if ((m_trainer || m_team) && source->blockSize() != m_options.model.blockSize)
        return Error::make(net::errc::kBadOptions, "the task's windows do not match the model's block size");
    if (m_team) {
        m_team->setSource(std::move(source));
        return Status::success();
    }
    if (m_trainer) {
        m_trainer->data().train = std::move(source);
        return Status::success();
    }
    if (!m_devices.team.empty()) {
        if (rowsPerStep() != int64_t(m_inner.batchSize))
            return Error::make(net::errc::kBadOptions,
                "a batch of " + std::to_string(m_inner.batchSize) + " does not split evenly between "
                    + std::to_string(m_devices.team.size()) + " devices");
        engine::parallel::DeviceTeamOptions team;
        team.devices = m_devices.team;
        team.zeroStage = m_devices.zeroStage;
        team.threadsPerRank = std::max(1, m_torchThreads / int(m_devices.team.size()));
        team.bf16Autocast = m_options.bf16Autocast;
        team.activationCheckpointing = m_devices.activationCheckpointing;
        auto made = engine::parallel::DeviceTeam::create(m_options, team, std::move(source));
        if (!made)
            return made.error();
        m_team = std::move(*made);
        return Status::success();
    }
    engine::TrainData data;
    data.train = std::move(source);
    auto trainer = engine::Trainer::create(m_options, std::move(data));
    if (!trainer)
        return trainer.error();
    m_trainer = std::move(*trainer);
    return Status::success();
}

engine::NamedParameters InnerTrainer::weights()
{
    if (engine::HostMaster* master = m_trainer->hostMaster())
        return master->named();
    return engine::namedParameters(m_trainer->model());
}

void InnerTrainer::weightsChanged()
{
    if (engine::HostMaster* master = m_trainer->hostMaster())
        master->toDevice();
}

Status InnerTrainer::assign(const std::vector<float>& theta)
{
    if (m_team)
        return m_team->assign(theta.data(), int64_t(theta.size()));
    Status assigned = diloco::assign(weights(), theta.data(), int64_t(theta.size()));
    if (assigned)
        weightsChanged();
    return assigned;
}

engine::StepReport InnerTrainer::step(double learningRate)
{
    return m_team ? m_team->step(learningRate) : m_trainer->step(learningRate);
}

std::vector<float> InnerTrainer::local()
{
    return m_team ? m_team->flatten() : diloco::flatten(weights());
}

bool InnerTrainer::sameSettings(const engine::GptConfig& model, const net::InnerSettings& inner) const
{
    engine::GptConfig config = model;
    config.dropout = 0.0;
    return config == m_options.model && inner == m_inner;
}

namespace {

Status finiteOrError(const std::vector<float>& local)
{
    for (float v : local)
        if (!std::isfinite(v))
            return Error::make(net::errc::kNonFinite, "the local weights are not finite after the inner steps");
    return Status::success();
}

// The flat vector from a file of exactly `elements` float32, read straight
// into the vector.
Result<std::vector<float>> readFlat(const std::filesystem::path& file, uint64_t elements)
{
    std::vector<float> values(elements);
    std::ifstream in(file, std::ios::binary);
    if (!in)
        return core::ioError("cannot open", file);
    in.read(reinterpret_cast<char*>(values.data()), std::streamsize(elements * sizeof(float)));
    if (!in)
        return core::ioError("cannot read", file);
    return values;
}

} // namespace

Result<TaskOutcome> InnerTrainer::run(const std::vector<float>& theta, std::unique_ptr<engine::BatchSource> source,
    uint64_t steps, uint64_t firstGlobalStep, const std::atomic<bool>& abort, const std::atomic<bool>& wrapUp,
    const std::function<void(const engine::StepReport&)>& onStep)
{
    return guarded([&] { return assign(theta); }, std::move(source), steps, firstGlobalStep, abort, wrapUp, onStep,
        [&](TaskOutcome& outcome) {
            outcome.local = local();
            return finiteOrError(outcome.local);
        });
}

Result<TaskOutcome> InnerTrainer::runFiles(const std::filesystem::path& thetaFile, uint64_t elements,
    const std::filesystem::path& localFile, std::unique_ptr<engine::BatchSource> source, uint64_t steps,
    uint64_t firstGlobalStep, const std::atomic<bool>& abort, const std::atomic<bool>& wrapUp,
    const std::function<void(const engine::StepReport&)>& onStep)
{
    std::error_code ec;
    const auto bytes = std::filesystem::file_size(thetaFile, ec);
    if (ec)
        return core::ioError("cannot read the size of", thetaFile, ec.value());
    if (bytes != elements * sizeof(float))
        return Error::make(net::errc::kBadSize,
            thetaFile.string() + " holds " + std::to_string(bytes) + " bytes, not " + std::to_string(elements)
                + " floats");
    const Load load = [&]() -> Status {
        if (!m_team) {
            Status assigned = diloco::assignFromFile(weights(), thetaFile);
            if (assigned)
                weightsChanged();
            return assigned;
        }
        auto theta = readFlat(thetaFile, elements);
        return theta ? assign(*theta) : Status(theta.error());
    };
    const Finish finish = [&](TaskOutcome&) -> Status {
        if (!m_team) {
            Status wrote = diloco::writeFlatFile(weights(), localFile);
            if (!wrote && wrote.error().code == net::errc::kNonFinite)
                return Error::make(net::errc::kNonFinite, "the local weights are not finite after the inner steps");
            return wrote;
        }
        const std::vector<float> values = local();
        if (Status finite = finiteOrError(values); !finite)
            return finite;
        auto out = core::AtomicFile::create(localFile);
        if (!out)
            return out.error();
        if (Status wrote = out->write(values.data(), values.size() * sizeof(float)); !wrote)
            return wrote;
        return out->commit();
    };
    return guarded(load, std::move(source), steps, firstGlobalStep, abort, wrapUp, onStep, finish);
}

Result<TaskOutcome> InnerTrainer::guarded(const Load& load, std::unique_ptr<engine::BatchSource> source, uint64_t steps,
    uint64_t firstGlobalStep, const std::atomic<bool>& abort, const std::atomic<bool>& wrapUp,
    const std::function<void(const engine::StepReport&)>& onStep, const Finish& finish)
{
    std::string why;
    try {
        return runUnguarded(load, std::move(source), steps, firstGlobalStep, abort, wrapUp, onStep, finish);
    } catch (const c10::Error& e) {
        why = e.what_without_backtrace();
    } catch (const std::exception& e) {
        why = e.what();
    }
    // A rank that failed inside a collective leaves the team's process
    // groups unusable: the next task builds a new team (its moments start
    // over).
    m_team.reset();
    return Error::make(net::errc::kTrainingFailed, "training failed: " + why);
}

Result<TaskOutcome> InnerTrainer::runUnguarded(const Load& load, std::unique_ptr<engine::BatchSource> source,
    uint64_t steps, uint64_t firstGlobalStep, const std::atomic<bool>& abort, const std::atomic<bool>& wrapUp,
    const std::function<void(const engine::StepReport&)>& onStep, const Finish& finish)
{
    // The OpenMP thread count is per thread: a fresh training thread starts
    // with the default, not what main() configured.
    if (m_torchThreads > 0)
        at::set_num_threads(m_torchThreads);
    if (Status prepared = prepare(std::move(source)); !prepared)
        return prepared.error();
    if (Status loaded = load(); !loaded)
        return loaded.error();

    TaskOutcome outcome;
    double lossSum = 0;
    for (uint64_t i = 0; i < steps; ++i) {
        if (abort.load())
            return Error::make(net::errc::kCancelled, "training stopped after " + std::to_string(i) + " steps");
        if (i > 0 && wrapUp.load())
            break;
        const engine::StepReport report = step(learningRate(m_inner, uint64_t(innerStepsTaken()), firstGlobalStep + i));
        lossSum += report.loss;
        outcome.lastLoss = report.loss;
        outcome.computeMs += report.stepMs;
        ++outcome.steps;
        if (onStep)
            onStep(report);
    }
    // Between tasks the core holds the weights and AdamW's moments, not the
    // last step's gradients (the next step writes them afresh).
    if (m_trainer)
        m_trainer->releaseGradients();
    outcome.tokens = outcome.steps * uint64_t(rowsPerStep()) * uint64_t(m_options.model.blockSize);
    outcome.meanLoss = outcome.steps ? lossSum / double(outcome.steps) : 0.0;
    if (Status finished = finish(outcome); !finished)
        return finished.error();
    return outcome;
}

} // namespace crowdtrain::coreservice
