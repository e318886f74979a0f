#include "net/volunteer/core_trainer.h"

#include "core/file_io.h"
#include "net/core_link/windows_file.h"
#include "net/volunteer/local_store.h"
#include "net/wire/error_codes.h"

#include <chrono>

namespace crowdtrain::volunteer {
namespace {

using Clock = std::chrono::steady_clock;

// A code from the core that the agent may act on; anything else reads as
// a training failure (the core is not trusted to pick the agent's path).
Error fromCore(const Error& error)
{
    for (std::string_view known : {net::errc::kCancelled, net::errc::kNonFinite, net::errc::kBadOptions,
             net::errc::kBadSize, net::errc::kTrainingFailed, net::errc::kBadDevice, net::errc::kNoDevice})
        if (error.code == known)
            return error;
    return Error::make(net::errc::kTrainingFailed, "the training core: " + error.code + ": " + error.message);
}

} // namespace

Status loadLocalWeights(TaskOutcome& outcome, uint64_t elements)
{
    if (outcome.localFile.empty())
        return Status::success();
    auto values = readFloatFile(outcome.localFile, elements);
    if (!values)
        return values.error();
    outcome.local = std::move(*values);
    outcome.localFile.clear();
    return Status::success();
}

CoreTrainer::CoreTrainer(CoreHost& host, CoreTrainerOptions options)
    : m_host(host)
    , m_options(std::move(options))
{ }

Status CoreTrainer::writeTheta(const std::vector<float>& theta, const std::string& sha256)
{
    if (!sha256.empty() && sha256 == m_thetaSha256)
        return Status::success();
    m_thetaSha256.clear();
    auto out = core::AtomicFile::create(m_options.scratchDir / "theta.f32");
    if (!out)
        return out.error();
    if (Status wrote = out->write(theta.data(), theta.size() * sizeof(float)); !wrote)
        return wrote;
    if (Status committed = out->commit(); !committed)
        return committed;
    m_thetaSha256 = sha256;
    return Status::success();
}

Status CoreTrainer::copyTheta(const std::filesystem::path& file, const std::string& sha256)
{
    if (!sha256.empty() && sha256 == m_thetaSha256)
        return Status::success();
    m_thetaSha256.clear();
    const std::filesystem::path target = m_options.scratchDir / "theta.f32";
    const std::filesystem::path temporary = core::temporarySibling(target);
    std::error_code ec;
    std::filesystem::copy_file(file, temporary, std::filesystem::copy_options::overwrite_existing, ec);
    if (!ec)
        std::filesystem::rename(temporary, target, ec);
    if (ec) {
        std::filesystem::remove(temporary, ec);
        return Error::make(net::errc::kIoError, "cannot copy " + file.string() + " for the training core");
    }
    m_thetaSha256 = sha256;
    return Status::success();
}

Result<TaskOutcome> CoreTrainer::run(const CoreTaskRequest& request, const std::vector<float>& theta,
    const std::string& thetaSha256, engine::BatchSource& source, const std::atomic<bool>& abort,
    const std::atomic<bool>& wrapUp, const std::function<bool()>& release,
    const std::function<void(const corelink::StepDone&)>& onStep)
{
    return start(
        request, theta.size(), source, [&] { return writeTheta(theta, thetaSha256); }, abort, wrapUp, release, onStep);
}

Result<TaskOutcome> CoreTrainer::run(const CoreTaskRequest& request, const std::filesystem::path& thetaFile,
    const std::string& thetaSha256, engine::BatchSource& source, const std::atomic<bool>& abort,
    const std::atomic<bool>& wrapUp, const std::function<bool()>& release,
    const std::function<void(const corelink::StepDone&)>& onStep)
{
    std::error_code ec;
    const uint64_t bytes = std::filesystem::file_size(thetaFile, ec);
    if (ec || bytes % sizeof(float) != 0)
        return Error::make(net::errc::kIoError, "cannot read theta from " + thetaFile.string());
    return start(
        request, bytes / sizeof(float), source, [&] { return copyTheta(thetaFile, thetaSha256); }, abort, wrapUp,
        release, onStep);
}

Result<TaskOutcome> CoreTrainer::start(const CoreTaskRequest& request, uint64_t elements, engine::BatchSource& source,
    const std::function<Status()>& writeTheta, const std::atomic<bool>& abort, const std::atomic<bool>& wrapUp,
    const std::function<bool()>& release, const std::function<void(const corelink::StepDone&)>& onStep)
{
    std::error_code ec;
    std::filesystem::create_directories(m_options.scratchDir, ec);
    const int64_t batch = int64_t(request.inner.batchSize);
    if (Status wrote = corelink::writeWindowsFile(
            m_options.scratchDir / "windows.bin", source, batch, request.steps * uint64_t(batch));
        !wrote)
        return wrote.error();
    if (Status wrote = writeTheta(); !wrote)
        return wrote.error();
    std::filesystem::remove(m_options.scratchDir / "local.f32", ec);
    auto lease = m_host.lease();
    if (!lease)
        return lease.error();
    return exchange(*lease, request, elements, abort, wrapUp, release, onStep);
}

Result<TaskOutcome> CoreTrainer::exchange(CoreHost::Lease& lease, const CoreTaskRequest& request, uint64_t elements,
    const std::atomic<bool>& abort, const std::atomic<bool>& wrapUp, const std::function<bool()>& release,
    const std::function<void(const corelink::StepDone&)>& onStep)
{
    corelink::CoreChannel& channel = lease.core().channel();
    corelink::TrainRequest train;
    train.taskId = request.taskId;
    train.model = request.model;
    train.inner = request.inner;
    train.devices = request.devices;
    train.threads = request.threads;
    train.thetaFile = (m_options.scratchDir / "theta.f32").string();
    train.elements = elements;
    train.windowsFile = (m_options.scratchDir / "windows.bin").string();
    train.steps = request.steps;
    train.firstGlobalStep = request.firstGlobalStep;
    train.localFile = (m_options.scratchDir / "local.f32").string();
    train.memoryBudgetBytes = request.memoryBudgetBytes;
    train.memoryTotalBytes = request.memoryTotalBytes;
    if (Status sent = channel.send(train.encode()); !sent)
        return Error::make(net::errc::kCoreFailed, "the training core " + lease.discard(false));

    // Whatever goes wrong from here leaves the core unusable.
    auto failed = [&](const Error& why) -> Error {
        const bool hung = why.code == net::errc::kTimeout;
        const std::string how = lease.discard(hung);
        if (hung)
            return Error::make(net::errc::kCoreHung,
                "the training core stopped reporting (" + why.message + "); it was stopped and will be started again");
        return Error::make(net::errc::kCoreFailed, "the training core " + how + " (" + why.message + ")");
    };
    bool started = false;
    uint64_t stepsSeen = 0;
    while (true) {
        const double stepBound = std::max<double>(m_options.stepTimeoutMs, 10.0 * m_slowestStepMs);
        const int timeoutMs = started && stepsSeen > 0 ? int(std::min(stepBound, 2e9))
                                                       : std::max(m_options.loadTimeoutMs, m_options.stepTimeoutMs);
        auto frame = channel.receive(timeoutMs);
        if (!frame)
            return failed(frame.error());
        if (frame->type == corelink::type::kError)
            return fromCore(corelink::decodeError(*frame)); // the core stays usable
        if (!started) {
            auto s = corelink::TrainStarted::decode(*frame);
            if (!s)
                return failed(s.error());
            m_started = std::move(*s);
            started = true;
            continue;
        }
        if (frame->type == corelink::type::kDone) {
            auto done = corelink::TrainDone::decode(*frame);
            if (!done)
                return failed(done.error());
            // Checked where it lies, a chunk at a time: the daemon never
            // holds the local weights whole (docs/architecture.md, "A
            // volunteer's memory, per parameter").
            if (Status finite = checkFloatFileFinite(train.localFile, elements); !finite) {
                if (finite.error().code == net::errc::kNonFinite)
                    return Error::make(net::errc::kNonFinite, "the local weights are not finite after the inner steps");
                return failed(Error::make(net::errc::kBadSize,
                    "its local weights file is missing or of the wrong size (" + finite.error().message + ")"));
            }
            TaskOutcome outcome;
            outcome.localFile = train.localFile;
            if (done->steps > request.steps || done->steps != stepsSeen)
                return failed(Error::make(net::errc::kMalformed,
                    "it reported " + std::to_string(done->steps) + " steps after " + std::to_string(stepsSeen)
                        + " step reports"));
            outcome.steps = done->steps;
            outcome.tokens = done->tokens;
            outcome.meanLoss = done->meanLoss;
            outcome.lastLoss = done->lastLoss;
            outcome.computeMs = done->computeMs;
            return outcome;
        }
        auto step = corelink::StepDone::decode(*frame);
        if (!step)
            return failed(step.error());
        if (step->step != stepsSeen + 1 || step->step > request.steps)
            return failed(Error::make(net::errc::kMalformed, "step " + std::to_string(step->step) + " out of order"));
        stepsSeen = step->step;
        m_slowestStepMs = std::max(m_slowestStepMs, step->stepMs);
        if (onStep)
            onStep(*step);
        std::string_view command = corelink::type::kGo;
        if (abort.load())
            command = corelink::type::kAbort;
        else if (wrapUp.load() || (release && release()))
            command = corelink::type::kWrapUp;
        if (Status sent = channel.send(corelink::message(command)); !sent)
            return failed(sent.error());
    }
}

} // namespace crowdtrain::volunteer
