#include "net/coordinator/evaluation.h"

#include "core/thread_name.h"
#include "core/thread_priority.h"
#include "engine/batch_sampler.h"
#include "engine/diloco/flat_params.h"
#include "engine/generate.h"

#include <nlohmann/json.hpp>

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
{
    if (m_spec.prompts.empty())
        return;
    if (!m_data.tokenizerDir) {
        std::fprintf(
            stderr, "%s: the project has prompts but no tokenizer; checkpoints get no samples\n", m_spec.name.c_str());
        return;
    }
    auto tokenizer = engine::loadTokenizer(*m_data.tokenizerDir);
    if (!tokenizer) {
        std::fprintf(
            stderr, "%s: no samples at checkpoints: %s\n", m_spec.name.c_str(), tokenizer.error().message.c_str());
        return;
    }
    m_tokenizer = std::move(*tokenizer);
}

Evaluation::~Evaluation()
{
    if (m_running)
        m_running->outcome.wait();
}

std::optional<double> Evaluation::evaluate(const std::vector<float>& params)
{
    if (m_data.val.empty() || m_spec.validation.batches <= 0)
        return std::nullopt;
    auto sampler
        = engine::BatchSampler::create(engine::wholeShards(m_data.val), m_spec.model.blockSize, kValidationSeed);
    if (!sampler)
        return std::nullopt;
    // Views over theta, not a copy of it (6 GB at GPT-2 1.5B): theta
    // outlives the evaluation and no close changes it meanwhile.
    if (!diloco::borrow(m_model, params.data(), int64_t(params.size())))
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

std::string Evaluation::writeSamples(int64_t round, const std::vector<float>& params)
{
    if (!m_tokenizer || m_spec.prompts.empty())
        return {};
    if (!diloco::borrow(m_model, params.data(), int64_t(params.size())))
        return {};
    torch::NoGradGuard noGrad;
    using json = nlohmann::json;
    json samples = json::array();
    for (std::size_t i = 0; i < m_spec.prompts.size(); ++i) {
        const std::string& prompt = m_spec.prompts[i];
        auto ids = m_tokenizer->tryEncode(prompt);
        std::string text;
        if (ids && !ids->empty()) {
            engine::SampleOptions options;
            options.maxNewTokens = kSampleTokens;
            options.temperature = kSampleTemperature;
            options.topK = kSampleTopK;
            options.seed = kSampleSeed + i; // the same seed for this prompt at every checkpoint
            const std::vector<int64_t> context(ids->begin(), ids->end());
            const std::vector<int64_t> generated = engine::generate(m_model, context, options);
            const std::vector<int32_t> tokens(generated.begin(), generated.end());
            text = m_tokenizer->decode(tokens);
        }
        samples.push_back({{"prompt", prompt}, {"text", text}});
    }
    const json out{{"round", round}, {"seed", kSampleSeed}, {"temperature", kSampleTemperature}, {"top_k", kSampleTopK},
        {"max_tokens", kSampleTokens}, {"samples", samples}};
    // A token may end inside a UTF-8 character: such bytes become U+FFFD.
    return out.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

void Evaluation::start(int64_t round, int64_t tokens, std::shared_ptr<const std::vector<float>> params,
    net::RoundClosedEvent event, bool withSamples, After after)
{
    Running running{Done{round, tokens, params, std::move(event), std::nullopt, {}, {}, {}, 0}, {}};
    running.outcome = std::async(std::launch::async, [this, params, round, tokens, withSamples, after] {
        core::nameThisThread("evaluation");
        core::belowTheLoop();
        Outcome outcome;
        try {
            if (m_faultPoint)
                m_faultPoint("evaluate", round);
            outcome.loss = evaluate(*params);
        } catch (const std::exception& e) {
            // No loss for the round; its checkpoint still goes out.
            outcome.failure = e.what();
        }
        if (withSamples && outcome.failure.empty()) {
            try {
                outcome.samplesJson = writeSamples(round, *params);
            } catch (const std::exception& e) {
                // The samples are a view of the checkpoint, never a reason to lose it.
                std::fprintf(stderr, "%s: no samples for round %lld: %s\n", m_spec.name.c_str(),
                    static_cast<long long>(round), e.what());
            }
        }
        if (after) {
            outcome.after = Done{round, tokens, params, {}, outcome.loss, outcome.samplesJson, {}, {}, 0};
            try {
                after(outcome.after);
            } catch (const std::exception& e) {
                outcome.after.checkpointError = e.what();
            }
        }
        return outcome;
    });
    m_running = std::move(running);
}

std::optional<Evaluation::Done> Evaluation::finish(bool wait)
{
    if (!m_running)
        return std::nullopt;
    if (!wait && m_running->outcome.wait_for(std::chrono::seconds(0)) != std::future_status::ready)
        return std::nullopt;
    Running running = std::move(*m_running);
    m_running.reset();
    // A failed evaluation costs the round its validation loss, nothing more:
    // the round is committed, and its event and checkpoint still go out.
    try {
        Outcome outcome = running.outcome.get();
        if (!outcome.failure.empty())
            std::fprintf(stderr, "%s: evaluation of round %lld failed: %s\n", m_spec.name.c_str(),
                static_cast<long long>(running.done.round), outcome.failure.c_str());
        running.done.valLoss = outcome.loss;
        running.done.samplesJson = std::move(outcome.samplesJson);
        running.done.checkpoint = std::move(outcome.after.checkpoint);
        running.done.checkpointError = std::move(outcome.after.checkpointError);
        running.done.bytesWritten = outcome.after.bytesWritten;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: evaluation of round %lld failed: %s\n", m_spec.name.c_str(),
            static_cast<long long>(running.done.round), e.what());
    }
    running.done.event.valLoss = running.done.valLoss;
    return std::move(running.done);
}

} // namespace crowdtrain::coordinator
