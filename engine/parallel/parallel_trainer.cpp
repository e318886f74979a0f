#include "engine/parallel/parallel_trainer.h"

#include "engine/error_codes.h"
#include "engine/hf_gpt2.h"
#include "engine/parallel/pipeline.h"
#include "engine/parallel/replicated_gpt.h"
#include "engine/parallel/tensor_parallel.h"

#include <chrono>
#include <cmath>

namespace crowdtrain::engine::parallel {
namespace {

// Stage s of p takes an even share of the blocks, the first ones one more.
StageLayout layoutOf(int s, int p, int64_t blocks)
{
    const int64_t base = blocks / p, extra = blocks % p;
    StageLayout layout;
    layout.first = s == 0;
    layout.last = s == p - 1;
    layout.blockBegin = s * base + std::min<int64_t>(s, extra);
    layout.blockEnd = layout.blockBegin + base + (s < extra ? 1 : 0);
    return layout;
}

} // namespace

Result<std::unique_ptr<ParallelTrainer>> ParallelTrainer::create(
    TrainOptions options, ParallelOptions parallel, TrainData data, std::shared_ptr<Mesh> mesh)
{
    if (Status valid = validate(options.model); !valid)
        return valid.error();
    if (!mesh)
        mesh = Mesh::single();
    auto bad = [](const std::string& message) { return Error::make(errc::kBadOptions, message); };
    if (!data.train)
        return bad("no training data");
    if (data.train->blockSize() != options.model.blockSize)
        return bad("data windows of " + std::to_string(data.train->blockSize()) + " tokens do not match block_size "
            + std::to_string(options.model.blockSize));
    if (options.batchSize <= 0 || options.gradAccumulationSteps <= 0 || options.maxIters < 0)
        return bad("batch size and accumulation steps must be positive");
    if (parallel.zeroStage < 0 || parallel.zeroStage > 3)
        return bad("ZeRO stage " + std::to_string(parallel.zeroStage) + " is not 0, 1, 2 or 3");
    const int tp = mesh->tp().size(), pp = mesh->stages();
    const GptConfig& c = options.model;
    if (tp > 1 && (c.nHead % tp != 0 || c.vocabSize % tp != 0))
        return bad("tensor parallel " + std::to_string(tp) + " must divide n_head " + std::to_string(c.nHead)
            + " and vocab_size " + std::to_string(c.vocabSize));
    if (pp > c.nLayer)
        return bad("pipeline parallel " + std::to_string(pp) + " exceeds n_layer " + std::to_string(c.nLayer));
    if (pp > 1 && (tp > 1 || parallel.zeroStage > 1))
        return bad("the pipeline composes with data parallel and ZeRO-1 only, not tensor parallel or ZeRO-2/3");
    if (c.dropout > 0 && (parallel.activationCheckpointing || tp > 1 || pp > 1))
        return bad("activation checkpointing, tensor and pipeline parallel need dropout 0 (no RNG tracking)");
    auto device = resolveDevice(options.device);
    if (!device)
        return device.error();
    options.device = device->str();
    return std::unique_ptr<ParallelTrainer>(
        new ParallelTrainer(std::move(options), parallel, std::move(data), std::move(mesh)));
}

ParallelTrainer::ParallelTrainer(
    TrainOptions options, ParallelOptions parallel, TrainData data, std::shared_ptr<Mesh> mesh)
    : m_options(std::move(options))
    , m_parallel(parallel)
    , m_data(std::move(data))
    , m_mesh(std::move(mesh))
    , m_device(m_options.device)
    , m_dpRank(m_mesh->dp().rank())
    , m_dpSize(m_mesh->dp().size())
{
    const int pp = m_mesh->stages();
    for (int s = 0; s < pp; ++s)
        m_layouts.push_back(layoutOf(s, pp, m_options.model.nLayer));
    m_layout = m_layouts[std::size_t(m_mesh->stage())];
    if (m_mesh->tp().size() > 1)
        m_model = std::make_unique<TensorParallelGpt>(m_options.model, m_options.seed, m_device, m_mesh->tp());
    else
        m_model = std::make_unique<ReplicatedGpt>(m_options.model, m_options.seed, m_device);
    auto units = stageUnits(*m_model, m_layout);
    std::set<std::string> names;
    for (auto& unit : units)
        for (auto& p : unit) {
            // AdamW's decay on matrices only, as engine::Trainer groups them.
            p.weightDecay = p.param.dim() >= 2 ? m_options.weightDecay : 0.0;
            if (pp > 1 && p.name == "wte.weight") {
                p.normWeight *= 0.5; // the first and the last stage both hold it
                m_tiedEmbedding = p.param;
            }
            names.insert(p.name);
            m_localParameters += p.param.numel();
        }
    m_model->dropExcept(names);
    m_zero = std::make_unique<ZeroOptimizer>(
        m_parallel.zeroStage, m_mesh->dp(), std::move(units), AdamWSettings{m_options.beta1, m_options.beta2}, m_meter);
    m_runner = std::make_unique<StageRunner>(
        *m_model, *m_zero, m_layout, m_parallel.activationCheckpointing, m_parallel.bf16, m_device);
}

std::pair<torch::Tensor, torch::Tensor> ParallelTrainer::nextBatch(BatchSource& source)
{
    const int64_t b = m_options.batchSize, t = m_options.model.blockSize;
    m_xBuffer.resize(std::size_t(m_dpSize * b * t));
    m_yBuffer.resize(m_xBuffer.size());
    source.next(m_dpSize * b, m_xBuffer.data(), m_yBuffer.data());
    const auto rows = torch::indexing::Slice(m_dpRank * b, (m_dpRank + 1) * b);
    auto x = torch::from_blob(m_xBuffer.data(), {m_dpSize * b, t}, torch::kLong).index({rows}).to(m_device).clone();
    auto y = torch::from_blob(m_yBuffer.data(), {m_dpSize * b, t}, torch::kLong).index({rows}).to(m_device).clone();
    return {x, y};
}

double ParallelTrainer::accumulateGradients(ParallelStepReport& report)
{
    const int64_t accumulation = m_options.gradAccumulationSteps;
    m_zero->zeroGrad();
    double lossSum = 0;
    if (m_mesh->stages() == 1) {
        for (int64_t micro = 0; micro < accumulation; ++micro) {
            auto [x, y] = nextBatch(*m_data.train);
            lossSum += m_runner->forward(0, x, y).item<double>();
            m_runner->backward(0, torch::Tensor(), 1.0 / double(accumulation));
        }
    } else {
        std::vector<torch::Tensor> xs, ys;
        for (int64_t micro = 0; micro < accumulation; ++micro) {
            auto [x, y] = nextBatch(*m_data.train);
            xs.push_back(x);
            ys.push_back(y);
        }
        const PipelineReport pipeline = runOneForwardOneBackward(*m_runner, *m_mesh, xs, ys,
            {m_options.batchSize, m_options.model.blockSize, m_options.model.nEmbd}, 1.0 / double(accumulation));
        lossSum = pipeline.lossSum;
        report.pipelineWaitMs = pipeline.waitMs;
        report.bubbleOnPaper = pipeline.bubbleOnPaper;
        if (m_tiedEmbedding.defined())
            m_mesh->tie().allreduceSum(m_tiedEmbedding.mutable_grad());
    }
    // The mean over the step's micro-batches and data-parallel ranks, as
    // the ranks that computed it (the last stage's; every tensor-parallel
    // rank alike) hold it.
    const double holders = double(m_mesh->worldSize() / m_mesh->stages());
    return m_mesh->world().allreduceScalar(m_layout.last ? lossSum / double(accumulation) : 0.0) / holders;
}

NamedParameters ParallelTrainer::computeGradients()
{
    ParallelStepReport unused;
    accumulateGradients(unused);
    m_zero->reduceGradients();
    const auto whole = wholeState(ZeroOptimizer::State::Gradients);
    NamedParameters result;
    for (const auto& [name, shape] : gptParameterShapes(m_options.model))
        if (whole.contains(name))
            result.emplace_back(name, whole.at(name));
    return result;
}

ParallelStepReport ParallelTrainer::step(std::optional<double> learningRate)
{
    const auto start = std::chrono::steady_clock::now();
    const int64_t bytesBefore = m_mesh->bytesSent();
    const double lr = learningRate ? *learningRate : learningRateAt(m_step, m_options.schedule);
    ParallelStepReport report;
    const double loss = accumulateGradients(report);
    const double squares = m_mesh->world().allreduceScalar(m_zero->reduceGradients());
    const double gradNorm = std::sqrt(squares);
    if (std::isfinite(gradNorm)) {
        double scale = 1.0;
        if (m_options.gradClip > 0 && m_options.gradClip / (gradNorm + 1e-6) < 1.0)
            scale = m_options.gradClip / (gradNorm + 1e-6);
        m_zero->step(lr, scale);
    }

    ++m_step;
    const int64_t tokens = m_dpSize * m_options.batchSize * m_options.model.blockSize * m_options.gradAccumulationSteps;
    m_tokensSeen += tokens;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    report.step = m_step;
    report.loss = loss;
    report.learningRate = lr;
    report.gradNorm = gradNorm;
    report.stepMs = seconds * 1e3;
    report.tokensPerSecond = double(tokens) / seconds;
    report.bytesSent = m_mesh->bytesSent() - bytesBefore;
    return report;
}

double ParallelTrainer::evaluate(BatchSource& source, int64_t iters)
{
    torch::NoGradGuard noGrad;
    const uint64_t resumeAt = source.position();
    source.setPosition(0);
    double sum = 0;
    for (int64_t i = 0; i < iters; ++i) {
        auto [x, y] = nextBatch(source);
        if (m_mesh->stages() == 1)
            sum += m_runner->forward(0, x, y).item<double>();
        else
            sum += runForwardOnly(
                *m_runner, *m_mesh, {x}, {y}, {m_options.batchSize, m_options.model.blockSize, m_options.model.nEmbd});
    }
    source.setPosition(resumeAt);
    const double holders = double(m_mesh->worldSize() / m_mesh->stages());
    sum = m_mesh->world().allreduceScalar(m_layout.last ? sum : 0.0) / holders;
    return iters > 0 ? sum / double(iters) : std::nan("");
}

EvalReport ParallelTrainer::evaluateAll()
{
    EvalReport report;
    report.step = m_step;
    report.trainLoss = m_data.trainEval ? evaluate(*m_data.trainEval, m_options.evalIters) : std::nan("");
    report.valLoss = m_data.val ? evaluate(*m_data.val, m_options.evalIters) : std::nan("");
    return report;
}

Status ParallelTrainer::run(const Trainer::Callbacks& callbacks)
{
    try {
        while (m_step < m_options.maxIters) {
            if (callbacks.beforeStep && !callbacks.beforeStep())
                return Status::success();
            const ParallelStepReport r = step();
            if (callbacks.onStep)
                callbacks.onStep(r.common(m_tokensSeen));
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

int ParallelTrainer::ownerStage(const std::string& name) const
{
    if (name.starts_with("ln_f."))
        return int(m_layouts.size()) - 1;
    if (name.starts_with("h.")) {
        const int64_t block = std::stoll(name.substr(2, name.find('.', 2) - 2));
        for (std::size_t s = 0; s < m_layouts.size(); ++s)
            if (block >= m_layouts[s].blockBegin && block < m_layouts[s].blockEnd)
                return int(s);
    }
    return 0; // wte, wpe
}

} // namespace crowdtrain::engine::parallel
