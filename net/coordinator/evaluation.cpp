#include "net/coordinator/evaluation.h"

#include "engine/batch_sampler.h"
#include "engine/diloco/flat_params.h"

#include <chrono>
#include <cstdio>

namespace crowdtrain::coordinator {
namespace {

constexpr uint64_t kValidationSeed = 0x5eed;

} // namespace

Evaluation::Evaluation(const ProjectSpec& spec, const engine::DataSet& data, engine::Gpt model,
    std::function<void(std::string_view, int64_t)> faultPoint)
    : m_spec(spec)
    , m_data(data)
    , m_model(std::move(model))
    , m_faultPoint(std::move(faultPoint))
{ }

Evaluation::~Evaluation()
{
    if (m_running)
        m_running->loss.wait();
}

std::optional<double> Evaluation::evaluate(const std::vector<float>& params)
{
    if (m_data.val.empty() || m_spec.validation.batches <= 0)
        return std::nullopt;
    auto sampler
        = engine::BatchSampler::create(engine::wholeShards(m_data.val), m_spec.model.blockSize, kValidationSeed);
    if (!sampler)
        return std::nullopt;
    if (!diloco::assign(m_model, params.data(), int64_t(params.size())))
        return std::nullopt;
    torch::NoGradGuard noGrad;
    const int64_t b = m_spec.validation.batchSize, t = m_spec.model.blockSize;
    std::vector<int64_t> x(std::size_t(b * t)), y(x.size());
    double sum = 0;
    for (int64_t i = 0; i < m_spec.validation.batches; ++i) {
        sampler->next(b, x.data(), y.data());
        sum += m_model
                   ->loss(torch::from_blob(x.data(), {b, t}, torch::kLong),
                       torch::from_blob(y.data(), {b, t}, torch::kLong))
                   .item<double>();
    }
    return sum / double(m_spec.validation.batches);
}

void Evaluation::start(
    int64_t round, int64_t tokens, std::shared_ptr<const std::vector<float>> params, net::RoundClosedEvent event)
{
    Running running{Done{round, tokens, params, std::move(event), std::nullopt}, {}};
    running.loss = std::async(std::launch::async, [this, params, round] {
        if (m_faultPoint)
            m_faultPoint("evaluate", round);
        return evaluate(*params);
    });
    m_running = std::move(running);
}

std::optional<Evaluation::Done> Evaluation::finish(bool wait)
{
    if (!m_running)
        return std::nullopt;
    if (!wait && m_running->loss.wait_for(std::chrono::seconds(0)) != std::future_status::ready)
        return std::nullopt;
    Running running = std::move(*m_running);
    m_running.reset();
    // A failed evaluation costs the round its validation loss, nothing more:
    // the round is committed, and its event and checkpoint still go out.
    try {
        running.done.valLoss = running.loss.get();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: evaluation of round %lld failed: %s\n", m_spec.name.c_str(),
            static_cast<long long>(running.done.round), e.what());
    }
    running.done.event.valLoss = running.done.valLoss;
    return std::move(running.done);
}

} // namespace crowdtrain::coordinator
