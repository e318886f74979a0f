#include "engine/trainer.h"

#include "engine/adamw8bit.h"
#include "engine/adamw8bit_tensors.h"
#include "engine/autocast_scope.h"
#include "engine/checkpointing.h"
#include "engine/cpu_kernels.h"
#include "engine/data_parallel.h"
#include "engine/error_codes.h"
#include "engine/fused_update.h"
#include "engine/host_master.h"
#include "engine/op_count.h"
#include "engine/thread_team.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <chrono>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <torch/version.h>
#if TORCH_VERSION_MAJOR >= 2
#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#endif

namespace crowdtrain::engine {
namespace {

// The device's own time for a step: two timing events on the device's
// current stream around it (CUDA, libtorch 2.x; libtorch 1.13's events
// cannot time). Read after the step's synchronisation; 0 where no event
// times.
class DeviceStepTimer {
public:
    explicit DeviceStepTimer([[maybe_unused]] const torch::Device& device)
    {
#if TORCH_VERSION_MAJOR >= 2
        if (!device.is_cuda())
            return;
        const c10::impl::VirtualGuardImpl guard(device.type());
        m_stream.emplace(guard.getStream(device));
        m_begin.emplace(device.type(), c10::EventFlag::BACKEND_DEFAULT);
        m_end.emplace(device.type(), c10::EventFlag::BACKEND_DEFAULT);
        m_begin->record(*m_stream);
#endif
    }

    void end()
    {
#if TORCH_VERSION_MAJOR >= 2
        if (m_end)
            m_end->record(*m_stream);
#endif
    }

    // After the device finished the step.
    double elapsedMs() const
    {
#if TORCH_VERSION_MAJOR >= 2
        if (m_begin && m_end)
            return m_begin->elapsedTime(*m_end);
#endif
        return 0.0;
    }

private:
#if TORCH_VERSION_MAJOR >= 2
    std::optional<c10::Stream> m_stream;
    std::optional<c10::Event> m_begin, m_end;
#endif
};

// The elements of a gradient the update reads through raw pointers.
float* gradientData(const torch::Tensor& param)
{
    const torch::Tensor& grad = param.grad();
    if (!grad.defined() || !grad.device().is_cpu() || grad.scalar_type() != torch::kFloat || !grad.is_contiguous())
        throw std::logic_error("a CPU replica's gradient is missing or not a contiguous float32 tensor");
    return grad.data_ptr<float>();
}

// Points each of the replica's weights at the primary's storage (each keeps
// its own gradient), unless it already does.
void shareWeights(Gpt& primary, Gpt& replica)
{
    torch::NoGradGuard noGrad;
    const auto from = primary->parameters();
    auto to = replica->parameters();
    for (std::size_t j = 0; j < from.size(); ++j)
        if (to[j].data_ptr() != from[j].data_ptr())
            to[j].set_data(from[j]);
}

// Replica i's share of b rows (or thread i's of b elements): the first
// b % n take one more.
std::pair<int64_t, int64_t> rowsOf(int64_t i, int64_t n, int64_t b)
{
    const int64_t base = b / n, extra = b % n;
    const int64_t begin = i * base + std::min(i, extra);
    return {begin, begin + base + (i < extra ? 1 : 0)};
}

} // namespace

Result<torch::Device> resolveDevice(const std::string& name)
{
    try {
        if (name == "auto")
            return torch::cuda::is_available() ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
        torch::Device device(name);
        if (device.is_cuda() && !torch::cuda::is_available())
            return Error::make(errc::kNoDevice, "device '" + name + "' requested but CUDA is not available");
        return device;
    } catch (const c10::Error&) {
        return Error::make(errc::kBadDevice, "unknown device '" + name + "' (use cpu, cuda, cuda:N or auto)");
    }
}

Result<std::unique_ptr<Trainer>> Trainer::create(
    TrainOptions options, TrainData data, std::shared_ptr<DataParallel> parallel)
{
    if (Status valid = validate(options.model); !valid)
        return valid.error();
    if (!data.train)
        return Error::make(errc::kBadOptions, "no training data");
    if (data.train->blockSize() != options.model.blockSize)
        return Error::make(errc::kBadOptions,
            "data windows of " + std::to_string(data.train->blockSize()) + " tokens do not match block_size "
                + std::to_string(options.model.blockSize));
    if (options.batchSize <= 0 || options.gradAccumulationSteps <= 0 || options.maxIters < 0)
        return Error::make(errc::kBadOptions, "batch size and accumulation steps must be positive");
    auto device = resolveDevice(options.device);
    if (!device)
        return device.error();
    if (options.cpuReplicas < 0)
        return Error::make(errc::kBadOptions, "cpu replicas must be 0 (automatic) or positive");
    if (options.activationCheckpointing && options.model.dropout > 0)
        return Error::make(errc::kBadOptions,
            "activation checkpointing needs dropout 0 (a recomputed block must draw "
            "what the first pass drew)");
    if (options.syncFreeUpdate && (options.int8Moments || options.bf16HostMaster))
        return Error::make(
            errc::kBadOptions, "8-bit AdamW moments and the host master run their own update, not the sync-free one");
    if (options.bf16HostMaster && parallel)
        return Error::make(errc::kBadOptions, "bf16 weights with a host master train on one device, alone");
    if (options.cpuReplicas > 1 && options.model.dropout > 0)
        return Error::make(errc::kBadOptions, "CPU replicas need dropout 0 to stay deterministic");
    int64_t replicas = 1;
    if (device->is_cpu() && !options.syncFreeUpdate) {
        replicas = options.cpuReplicas > 0 ? options.cpuReplicas
                                           : (options.model.dropout > 0 ? 1 : int64_t(at::get_num_threads()));
        replicas = std::clamp<int64_t>(replicas, 1, options.batchSize);
        // The replicas' update reads float32 gradients with the CPU kernels.
        if (options.bf16HostMaster || (options.int8Moments && options.int8MomentTensors))
            replicas = 1;
    }
    return std::unique_ptr<Trainer>(
        new Trainer(std::move(options), std::move(data), std::move(parallel), *device, replicas));
}

Trainer::Trainer(TrainOptions options, TrainData data, std::shared_ptr<DataParallel> parallel, torch::Device device,
    int64_t replicas)
    : m_options(std::move(options))
    , m_data(std::move(data))
    , m_parallel(std::move(parallel))
    , m_device(device)
{
    torch::manual_seed(m_options.seed);
    m_model = Gpt(m_options.model);
    m_model->to(m_device);
    if (m_parallel)
        m_parallel->broadcastParameters(m_model->parameters());

    using torch::optim::AdamWOptions;
    auto groupOptions = [&](double weightDecay) {
        auto o = std::make_unique<AdamWOptions>(m_options.schedule.learningRate);
        o->betas({m_options.beta1, m_options.beta2}).weight_decay(weightDecay).eps(1e-8);
        return o;
    };
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(m_model->decayedParameters(), groupOptions(m_options.weightDecay));
    groups.emplace_back(m_model->undecayedParameters(), groupOptions(0.0));
    m_optimizer
        = std::make_unique<torch::optim::AdamW>(std::move(groups), AdamWOptions(m_options.schedule.learningRate));
    createInt8Moments();
    if ((m_device.is_cuda() || m_options.syncFreeUpdate) && !m_options.int8Moments && !m_options.bf16HostMaster)
        m_syncFree = std::make_unique<SyncFreeAdamW>();

    if (replicas > 1) {
        // Building a replica draws initial weights; they are overwritten at
        // each step's first micro-batch, and the generator is put back so
        // that a seed gives the same run whatever the replica count.
        at::Generator generator = at::detail::getDefaultCPUGenerator();
        const torch::Tensor rng = generator.get_state();
        for (int64_t i = 1; i < replicas; ++i) {
            m_replicas.emplace_back(m_options.model);
            shareWeights(m_model, m_replicas.back());
        }
        generator.set_state(rng);
        // Each member computes with one thread: replicas, not kernels, share
        // the cores (two OpenMP pools on two cores halve each other's speed).
        const int mainThreads = at::get_num_threads();
        // libtorch sets a thread's OpenMP width from the process-wide count
        // at the thread's first parallel op: that must happen here, while
        // the count is 1, or each member would later open a pool of its own.
        m_team = std::make_unique<ThreadTeam>(int(replicas), [](int) {
            at::set_num_threads(1);
            at::internal::lazy_init_num_threads();
        });
        m_team->run([](int) {});
        at::set_num_threads(mainThreads);
    }
}

Trainer::~Trainer() = default;

void Trainer::createInt8Moments()
{
    if (m_options.bf16HostMaster)
        m_hostMaster = std::make_unique<HostMaster>(m_model, *m_optimizer);
    else if (m_options.int8Moments && m_device.is_cpu() && !m_options.int8MomentTensors)
        m_adamW8bit = std::make_unique<AdamW8bit>();
    else if (m_options.int8Moments)
        m_adamW8bitTensors = std::make_unique<AdamW8bitTensors>();
}

void Trainer::releaseGradients()
{
    for (Gpt* model : allModels())
        for (auto& p : (*model)->parameters())
            p.mutable_grad() = torch::Tensor();
}

StepReport Trainer::step(std::optional<double> learningRate)
{
    const auto start = std::chrono::steady_clock::now();
    DeviceStepTimer deviceTime(m_device);
    const int64_t t = m_options.model.blockSize;
    const int64_t b = m_options.batchSize;
    const int64_t world = m_parallel ? m_parallel->worldSize() : 1;
    const int64_t rank = m_parallel ? m_parallel->rank() : 0;
    const int64_t accumulation = m_options.gradAccumulationSteps;

    m_model->train();
    const double lr = learningRate ? *learningRate : learningRateAt(m_step, m_options.schedule);
    for (auto& group : m_optimizer->param_groups())
        static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
    if (m_team) {
        // Backward then writes each gradient fresh instead of adding to zeros.
        for (Gpt* model : allModels())
            for (auto& p : (*model)->parameters())
                p.mutable_grad() = torch::Tensor();
    } else {
        m_optimizer->zero_grad();
    }

    // Every rank draws the same global batch and trains on its own rows, so
    // N ranks x batch B see exactly what 1 rank x batch N*B would.
    m_xBuffer.resize(std::size_t(world * b * t));
    m_yBuffer.resize(m_xBuffer.size());
    StepReport report;
    auto mark = std::chrono::steady_clock::now();
    const auto lap = [&mark](double& ms) {
        const auto now = std::chrono::steady_clock::now();
        ms += std::chrono::duration<double, std::milli>(now - mark).count();
        mark = now;
    };
    // The losses stay on the device until the step's end: reading one would
    // wait for the device in the middle of the step.
    torch::Tensor lossSum;
    for (int64_t micro = 0; micro < accumulation; ++micro) {
        m_data.train->next(world * b, m_xBuffer.data(), m_yBuffer.data());
        const auto rows = torch::indexing::Slice(rank * b, (rank + 1) * b);
        auto x
            = torch::from_blob(m_xBuffer.data(), {world * b, t}, torch::kLong).index({rows}).to(m_device, true, true);
        auto y
            = torch::from_blob(m_yBuffer.data(), {world * b, t}, torch::kLong).index({rows}).to(m_device, true, true);
        lap(report.dataMs);
        const double scale = 1.0 / double(accumulation);
        const torch::Tensor loss = m_team ? replicatedMicroStep(x, y, scale, micro == 0) : microStep(x, y, scale);
        lossSum = micro == 0 ? loss : lossSum + loss;
        lap(report.forwardBackwardMs);
    }
    const torch::Tensor gradNorm = m_hostMaster
        ? torch::scalar_tensor(m_hostMaster->step(m_options.gradClip), torch::kDouble)
        : m_team ? replicatedUpdate()
                 : update();
    lap(report.updateMs);
    double meanLoss = 0;
    {
        // The step's one read from the device, after its last kernel.
        RECORD_USER_SCOPE(kStepRead);
        const torch::Tensor values = torch::stack({lossSum, gradNorm.to(torch::kDouble)}).cpu();
        meanLoss = values.data_ptr<double>()[0] / double(accumulation);
        report.gradNorm = values.data_ptr<double>()[1];
    }
    if (m_syncFree)
        m_syncFree->finish(std::isfinite(report.gradNorm));
    if (m_parallel)
        meanLoss = m_parallel->averageScalar(meanLoss);
    deviceTime.end();
    if (m_device.is_cuda())
        torch::cuda::synchronize();

    ++m_step;
    const int64_t tokens = world * b * t * accumulation;
    m_tokensSeen += tokens;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    report.step = m_step;
    report.loss = meanLoss;
    report.learningRate = lr;
    report.stepMs = seconds * 1e3;
    report.deviceMs = deviceTime.elapsedMs();
    report.tokensPerSecond = double(tokens) / seconds;
    report.tokensSeen = m_tokensSeen;
    return report;
}

torch::Tensor Trainer::microStep(const torch::Tensor& x, const torch::Tensor& y, double lossScale)
{
    const bool bf16 = m_device.is_cuda() && m_options.bf16Autocast;
    if (m_options.activationCheckpointing)
        return checkpointedLossBackward(m_model, x, y, lossScale, bf16).to(torch::kDouble);
    torch::Tensor loss;
    {
        AutocastScope autocast(bf16);
        loss = m_model->loss(x, y);
    }
    (loss * lossScale).backward();
    return loss.detach().to(torch::kDouble);
}

// A non-finite gradient would poison the weights and the optimizer's moments:
// both update paths skip the step then and let the caller see the bad loss.
torch::Tensor Trainer::update()
{
    auto parameters = m_model->parameters();
    if (m_parallel)
        m_parallel->averageGradients(parameters);
    if (m_syncFree)
        return m_syncFree->step(*m_optimizer, m_options.gradClip);
    const double maxNorm = m_options.gradClip > 0 ? m_options.gradClip : std::numeric_limits<double>::infinity();
    const double gradNorm = torch::nn::utils::clip_grad_norm_(parameters, maxNorm);
    if (std::isfinite(gradNorm)) {
        if (m_adamW8bit) {
            if (!m_adamW8bit->step(*m_optimizer))
                throw std::logic_error("8-bit AdamW moments need contiguous float32 CPU parameters");
        } else if (m_adamW8bitTensors) {
            if (!m_adamW8bitTensors->step(*m_optimizer))
                throw std::logic_error("8-bit AdamW moments need contiguous float32 parameters");
        } else if (m_device.is_cpu())
            fusedAdamWStep(*m_optimizer);
        else
            m_optimizer->step();
    }
    return torch::scalar_tensor(gradNorm, torch::kDouble);
}

torch::Tensor Trainer::replicatedUpdate()
{
    torch::NoGradGuard noGrad;
    // Every replica ran the same graph, so a parameter has a gradient in all
    // of them or in none.
    const auto primary = m_model->parameters();
    std::vector<std::vector<torch::Tensor>> replicas;
    for (Gpt& replica : m_replicas)
        replicas.push_back(replica->parameters());
    std::vector<int64_t> sizes;
    std::vector<float*> grads;
    std::vector<std::vector<const float*>> replicaGrads(m_replicas.size());
    for (std::size_t j = 0; j < primary.size(); ++j) {
        if (!primary[j].grad().defined())
            continue;
        sizes.push_back(primary[j].numel());
        grads.push_back(gradientData(primary[j]));
        for (std::size_t r = 0; r < replicas.size(); ++r)
            replicaGrads[r].push_back(gradientData(replicas[r][j]));
    }
    const int members = m_team->size();
    const int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t(0));
    std::vector<double> squares(std::size_t(members), 0.0);
    // Each thread sums the replicas' gradients into the primary's over its
    // slice of the elements and, unless ranks still have to average them,
    // takes the slice's share of the norm in the same pass.
    auto pass = [&](int member, bool addReplicas, bool takeNorm) {
        const auto [begin, end] = rowsOf(member, members, total);
        forEachPiece(sizes, begin, end, [&](std::size_t j, int64_t at, int64_t count) {
            if (addReplicas)
                for (const auto& replica : replicaGrads)
                    addInto(grads[j] + at, replica[j] + at, count);
            if (takeNorm)
                squares[std::size_t(member)] += sumOfSquares(grads[j] + at, count);
        });
    };
    m_team->run([&](int member) { pass(member, true, !m_parallel); });
    if (m_parallel) {
        m_parallel->averageGradients(primary);
        m_team->run([&](int member) { pass(member, false, true); });
    }
    const double gradNorm = std::sqrt(std::accumulate(squares.begin(), squares.end(), 0.0));
    const torch::Tensor norm = torch::scalar_tensor(gradNorm, torch::kDouble);
    if (!std::isfinite(gradNorm))
        return norm;
    // clip_grad_norm_'s rule, applied as AdamW reads each gradient.
    float gradScale = 1.0f;
    if (m_options.gradClip > 0 && m_options.gradClip / (gradNorm + 1e-6) < 1.0)
        gradScale = float(m_options.gradClip / (gradNorm + 1e-6));
    if (m_adamW8bit) {
        if (!m_adamW8bit->prepare(*m_optimizer, gradScale))
            throw std::logic_error("8-bit AdamW moments need contiguous float32 CPU parameters");
        m_team->run([&](int member) {
            const auto [begin, end] = rowsOf(member, members, m_adamW8bit->blocks());
            m_adamW8bit->run(begin, end);
        });
        return norm;
    }
    FusedAdamW adamW;
    if (!adamW.prepare(*m_optimizer, gradScale))
        throw std::logic_error("CPU replicas hold a parameter that is not a contiguous float32 tensor");
    m_team->run([&](int member) {
        const auto [begin, end] = rowsOf(member, members, adamW.size());
        adamW.run(begin, end);
    });
    return norm;
}

std::string Trainer::updateKernelName() const
{
    if (m_syncFree)
        return SyncFreeAdamW::describe(m_device);
    const std::string threads = m_team ? ", over " + std::to_string(m_team->size()) + " replicas' threads" : "";
    if (m_hostMaster)
        return "AdamW with 8-bit moments on the host's fp32 master, bf16 weights on the device (engine/host_master.h)";
    if (m_adamW8bitTensors)
        return "AdamW with 8-bit moments from tensor operations (engine/adamw8bit_tensors.h)";
    if (m_adamW8bit)
        return "AdamW with 8-bit moments (engine/adamw8bit.h)" + threads;
    if (!m_device.is_cpu())
        return "libtorch's AdamW";
    return "the CPU's fused AdamW kernel (engine/cpu_kernels.h)" + threads;
}

std::vector<Gpt*> Trainer::allModels()
{
    std::vector<Gpt*> models{&m_model};
    for (Gpt& replica : m_replicas)
        models.push_back(&replica);
    return models;
}

torch::Tensor Trainer::replicatedMicroStep(const torch::Tensor& x, const torch::Tensor& y, double lossScale, bool first)
{
    const int64_t n = m_team->size(), b = x.size(0);
    std::vector<double> losses(std::size_t(n), 0.0);
    m_team->run([&](int i) {
        Gpt& model = i == 0 ? m_model : m_replicas[std::size_t(i - 1)];
        if (first && i > 0)
            shareWeights(m_model, model); // a no-op unless the primary's tensors were replaced
        const auto [begin, end] = rowsOf(i, n, b);
        const auto rows = torch::indexing::Slice(begin, end);
        const double share = double(end - begin) / double(b);
        if (m_options.activationCheckpointing) {
            losses[std::size_t(i)]
                = checkpointedLossBackward(model, x.index({rows}), y.index({rows}), lossScale * share, false)
                      .item<double>()
                * share;
            return;
        }
        torch::Tensor loss = model->loss(x.index({rows}), y.index({rows}));
        (loss * (lossScale * share)).backward();
        losses[std::size_t(i)] = loss.item<double>() * share;
    });
    double sum = 0;
    for (double l : losses)
        sum += l;
    return torch::scalar_tensor(sum, torch::kDouble);
}

double Trainer::evaluate(BatchSource& source, int64_t iters)
{
    torch::NoGradGuard noGrad;
    m_model->eval();
    const int64_t t = source.blockSize();
    const int64_t b = m_options.batchSize;
    const int64_t world = m_parallel ? m_parallel->worldSize() : 1;
    const int64_t rank = m_parallel ? m_parallel->rank() : 0;
    const uint64_t resumeAt = source.position();
    source.setPosition(0);
    // As in step(): every rank draws the same global batches and evaluates
    // its own rows, so N ranks x B estimate exactly what 1 rank x N*B does.
    std::vector<int64_t> x(std::size_t(world * b * t)), y(x.size());
    const auto rows = torch::indexing::Slice(rank * b, (rank + 1) * b);
    double sum = 0;
    for (int64_t i = 0; i < iters; ++i) {
        source.next(world * b, x.data(), y.data());
        const auto xs = torch::from_blob(x.data(), {world * b, t}, torch::kLong).index({rows}).to(m_device);
        const auto ys = torch::from_blob(y.data(), {world * b, t}, torch::kLong).index({rows}).to(m_device);
        AutocastScope autocast(m_device.is_cuda() && m_options.bf16Autocast);
        sum += m_model->loss(xs, ys).item<double>();
    }
    source.setPosition(resumeAt);
    m_model->train();
    if (m_parallel)
        sum = m_parallel->averageScalar(sum);
    return iters > 0 ? sum / double(iters) : std::nan("");
}

EvalReport Trainer::evaluateAll()
{
    EvalReport report;
    report.step = m_step;
    report.trainLoss = m_data.trainEval ? evaluate(*m_data.trainEval, m_options.evalIters) : std::nan("");
    report.valLoss = m_data.val ? evaluate(*m_data.val, m_options.evalIters) : std::nan("");
    return report;
}

Status Trainer::run(const Callbacks& callbacks)
{
    try {
        while (m_step < m_options.maxIters) {
            if (callbacks.beforeStep && !callbacks.beforeStep())
                return Status::success();
            const StepReport report = step();
            if (callbacks.onStep)
                callbacks.onStep(report);
            const bool last = m_step == m_options.maxIters;
            if ((m_options.evalInterval > 0 && m_step % m_options.evalInterval == 0) || last) {
                const EvalReport eval = evaluateAll();
                if (callbacks.onEval)
                    callbacks.onEval(eval);
            }
        }
        return Status::success();
    } catch (const c10::Error& e) {
        return Error::make(errc::kTrainingFailed, e.what_without_backtrace());
    } catch (const std::exception& e) {
        return Error::make(errc::kTrainingFailed, e.what());
    }
}

} // namespace crowdtrain::engine
