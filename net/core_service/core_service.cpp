#include "net/core_service/core_service.h"

#include "core/file_io.h"
#include "core/utf8.h"
#include "engine/diloco/flat_params.h"
#include "engine/generate.h"
#include "engine/model_io.h"
#include "engine/tokenizer.h"
#include "net/core_link/core_messages.h"
#include "net/core_link/windows_file.h"
#include "net/core_service/cuda_driver.h"
#include "net/core_service/inner_trainer.h"
#include "net/wire/error_codes.h"

#include <torch/cuda.h>
#include <torch/version.h>

// CMake defines CROWDTRAIN_CUDA_CORE when libtorch was built with CUDA (a
// CPU libtorch may still ship the c10/cuda headers).
#if defined(CROWDTRAIN_CUDA_CORE)
#include <c10/cuda/CUDACachingAllocator.h>
#define CROWDTRAIN_CORE_CUDA 1
#else
#define CROWDTRAIN_CORE_CUDA 0
#endif

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <thread>
#include <unistd.h>

namespace crowdtrain::coreservice {
namespace {

using corelink::CoreChannel;
using corelink::Frame;

corelink::CoreHello hello()
{
    corelink::CoreHello h;
    h.family = CROWDTRAIN_CORE_CUDA ? "cuda" : "cpu";
    h.runtime = std::string("libtorch ") + TORCH_VERSION;
    h.devices.push_back("cpu");
    const int64_t gpus = CROWDTRAIN_CORE_CUDA ? int64_t(torch::cuda::device_count()) : 0;
    for (int64_t i = 0; i < gpus; ++i)
        h.devices.push_back("cuda:" + std::to_string(i));
#if CROWDTRAIN_CORE_CUDA
    if (gpus == 0)
        h.note = noCudaDeviceNote(probeCudaDriver(), CROWDTRAIN_CUDA_RUNTIME);
#endif
    return h;
}

class Service {
public:
    Service(CoreChannel& channel, const Fault& fault)
        : m_channel(channel)
        , m_fault(fault)
    { }

    int run()
    {
        while (true) {
            auto frame = m_channel.receive(-1);
            if (!frame)
                return frame.error().code == corelink::kClosed ? 0 : 3;
            Status answered = dispatch(*frame);
            if (m_exit)
                return 0;
            if (!answered && !m_channel.open())
                return 0;
            if (!answered)
                (void)m_channel.send(corelink::errorMessage(answered.error()));
        }
    }

private:
    Status dispatch(const Frame& frame)
    {
        namespace t = corelink::type;
        if (frame.type == t::kHello) {
            corelink::CoreHello h = hello();
            if (m_fault.kind == "old_protocol")
                h.protocol = corelink::kCoreProtocol - 1;
            return m_channel.send(h.encode());
        }
        if (frame.type == t::kExit) {
            m_exit = true;
            return Status::success();
        }
        if (frame.type == t::kTrain) {
            auto request = corelink::TrainRequest::decode(frame);
            return request ? train(*request) : request.error();
        }
        if (frame.type == t::kInit) {
            auto request = corelink::InitRequest::decode(frame);
            return request ? init(*request) : request.error();
        }
        if (frame.type == t::kGenerate) {
            auto request = corelink::GenerateRequest::decode(frame);
            return request ? generate(*request) : request.error();
        }
        return Error::make(net::errc::kUnknownType, "the core has no request '" + frame.type + "'");
    }

    void capDeviceMemory([[maybe_unused]] const corelink::TrainRequest& r)
    {
#if CROWDTRAIN_CORE_CUDA
        if (r.memoryTotalBytes == 0 || r.memoryBudgetBytes == 0)
            return;
        const double fraction = std::min(1.0, double(r.memoryBudgetBytes) / double(r.memoryTotalBytes));
        const auto& d = r.devices;
        const std::vector<std::string> devices = d.team.empty() ? std::vector{d.device} : d.team;
        for (const std::string& name : devices) {
            if (name == "cpu")
                continue;
            const auto colon = name.find(':'); // "auto" and "cuda" are GPU 0
            const int index = colon == std::string::npos ? 0 : std::atoi(name.c_str() + colon + 1);
            if (index < int(torch::cuda::device_count()))
                c10::cuda::CUDACachingAllocator::setMemoryFraction(fraction, c10::DeviceIndex(index));
        }
#endif
    }

    Status train(const corelink::TrainRequest& r)
    {
        const engine::GptConfig model = corelink::gptConfigOf(r.model);
        if (Status valid = engine::validate(model); !valid)
            return valid;
        if (m_trainer && !(m_trainer->sameSettings(model, r.inner) && m_devices == describe(r.devices)))
            m_trainer.reset();
        if (!m_trainer) {
            capDeviceMemory(r);
            m_trainer = std::make_unique<InnerTrainer>(model, r.inner, r.devices, int(r.threads));
            m_devices = describe(r.devices);
        }
        m_stepInTask = 0;
        auto source = corelink::WindowsFileSource::open(r.windowsFile, model.blockSize, model.vocabSize);
        if (!source)
            return source.error();
        corelink::TrainStarted started;
        started.innerStepsTaken = uint64_t(m_trainer->innerStepsTaken());
        started.microBatch = uint64_t(m_trainer->microBatch());
        started.parallelMode = m_trainer->parallelMode();
        // The trainer knows its device name after the first run; before it,
        // the request's.
        started.deviceName = m_trainer->deviceName().empty() ? deviceNames(r.devices) : m_trainer->deviceName();
        if (Status sent = m_channel.send(started.encode()); !sent)
            return sent;

        std::atomic<bool> abort{false}, wrapUp{false};
        // Theta goes from its file straight into the model and the local
        // weights from the model into theirs (docs/architecture.md, "A
        // volunteer's memory").
        auto outcome
            = m_trainer->runFiles(r.thetaFile, r.elements, r.localFile, std::move(*source), r.steps, r.firstGlobalStep,
                abort, wrapUp, [&](const engine::StepReport& report) { afterStep(report, abort, wrapUp); });
        if (!m_channel.open())
            return Error::make(corelink::kClosed, "the daemon went away");
        if (!outcome)
            return outcome.error();
        corelink::TrainDone done;
        done.steps = outcome->steps;
        done.tokens = outcome->tokens;
        done.meanLoss = outcome->meanLoss;
        done.lastLoss = outcome->lastLoss;
        done.computeMs = outcome->computeMs;
        return m_channel.send(done.encode());
    }

    // Reports the step and waits for the daemon's word: the daemon's pause,
    // rest and wrap-up all act here, between two steps.
    void afterStep(const engine::StepReport& report, std::atomic<bool>& abort, std::atomic<bool>& wrapUp)
    {
        ++m_stepInTask;
        commitFault(report);
        corelink::StepDone step;
        step.step = m_stepInTask;
        step.loss = report.loss;
        step.stepMs = report.stepMs;
        step.deviceMs = report.deviceMs;
        step.tokensPerSecond = report.tokensPerSecond;
        if (!m_channel.send(step.encode())) {
            abort.store(true);
            return;
        }
        auto command = m_channel.receive(-1);
        if (!command || command->type == corelink::type::kAbort)
            abort.store(true);
        else if (command->type == corelink::type::kWrapUp)
            wrapUp.store(true);
        else if (command->type != corelink::type::kGo)
            abort.store(true);
    }

    void commitFault(const engine::StepReport&)
    {
        if (m_fault.kind.empty() || m_stepInTask != m_fault.step)
            return;
        if (!m_fault.onceFile.empty()) {
            // Once across processes: the first core to create the file commits it.
            const int fd = ::open(m_fault.onceFile.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
            if (fd < 0)
                return;
            ::close(fd);
        }
        if (m_fault.kind == "hang")
            while (true)
                std::this_thread::sleep_for(std::chrono::hours(1));
        if (m_fault.kind == "crash")
            std::abort();
        if (m_fault.kind == "garbage") {
            const char junk[] = "\xff\xff\xff\xffnot a frame";
            (void)!::write(m_channel.fd(), junk, sizeof junk - 1);
        }
    }

    Status init(const corelink::InitRequest& r)
    {
        const engine::GptConfig model = corelink::gptConfigOf(r.model);
        if (Status valid = engine::validate(model); !valid)
            return valid;
        engine::Gpt gpt = diloco::seededModel(model, r.seed);
        if (Status wrote = diloco::writeFlatFile(gpt, r.outFile); !wrote)
            return wrote;
        net::MapWriter w = corelink::message(corelink::type::kInitialized);
        w.u64("elements", uint64_t(gpt->parameterCount()));
        return m_channel.send(w);
    }

    Status generate(const corelink::GenerateRequest& r)
    {
        const std::filesystem::path folder = r.folder;
        auto tokenizer = engine::loadTokenizer(folder / "tokenizer");
        if (!tokenizer)
            return Error::make(
                tokenizer.error().code, "no tokenizer with this checkpoint: " + tokenizer.error().message);
        auto model = engine::loadModel(folder);
        if (!model)
            return model.error();
        const auto promptIds = (*tokenizer)->encode(r.prompt);
        if (promptIds.empty())
            return Error::make(net::errc::kBadOptions, "the prompt encodes to no tokens");
        engine::SampleOptions options;
        options.maxNewTokens = int64_t(r.maxTokens);
        options.temperature = r.temperature;
        options.topK = int64_t(r.topK);
        options.seed = r.seed;
        core::Utf8Stream text;
        bool sending = true;
        engine::generate(*model, std::vector<int64_t>(promptIds.begin(), promptIds.end()), options, [&](int64_t token) {
            const int32_t one = int32_t(token);
            const std::string piece = text.push((*tokenizer)->decode(std::span<const int32_t>(&one, 1)));
            if (!piece.empty())
                sending = bool(m_channel.send(corelink::textMessage(piece)));
            return sending;
        });
        if (const std::string rest = text.finish(); !rest.empty() && sending)
            (void)m_channel.send(corelink::textMessage(rest));
        return m_channel.send(corelink::message(corelink::type::kGenerated));
    }

    // "cpu", "cuda:0", or a team's names joined by commas.
    static std::string deviceNames(const corelink::TrainingDevices& d)
    {
        if (d.team.empty())
            return d.device;
        std::string names;
        for (const std::string& member : d.team)
            names += (names.empty() ? "" : ",") + member;
        return names;
    }

    static std::string describe(const corelink::TrainingDevices& d)
    {
        std::string names = d.device;
        for (const std::string& member : d.team)
            names += "," + member;
        return names + "/" + std::to_string(d.zeroStage) + (d.activationCheckpointing ? "c" : "")
            + (d.int8Moments ? "8" : "") + (d.bf16HostMaster ? "h" : "") + "/" + std::to_string(d.microBatch);
    }

    CoreChannel& m_channel;
    Fault m_fault;
    bool m_exit = false;
    uint64_t m_stepInTask = 0;
    std::unique_ptr<InnerTrainer> m_trainer;
    std::string m_devices;
};

} // namespace

Fault Fault::parse(const char* text, const char* onceFile)
{
    Fault fault;
    fault.onceFile = onceFile ? onceFile : "";
    if (!text)
        return fault;
    const std::string spec = text;
    if (spec == "old_protocol") {
        fault.kind = spec;
        return fault;
    }
    const auto colon = spec.find(':');
    if (colon == std::string::npos)
        return fault;
    const std::string kind = spec.substr(0, colon);
    for (const char* known : {"hang", "garbage", "crash"})
        if (kind == std::string(known) + "_at_step") {
            fault.kind = known;
            fault.step = std::strtoull(spec.c_str() + colon + 1, nullptr, 10);
        }
    return fault;
}

int serve(corelink::CoreChannel& channel, const Fault& fault)
{
    try {
        return Service(channel, fault).run();
    } catch (const std::exception& e) {
        (void)channel.send(corelink::errorMessage(Error::make(net::errc::kTrainingFailed, e.what())));
        return 3;
    }
}

} // namespace crowdtrain::coreservice
