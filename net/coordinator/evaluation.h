#pragma once

// The validation loss of a project's versions: the mean loss of theta over
// fixed windows of the validation shards (the same windows every round, so
// the curve compares like with like). A committed round's evaluation runs on
// its own thread, one at a time, so that volunteers never wait for it; the
// server's loop collects it with finish().
//
// At a round whose checkpoint is due, the same thread also continues each
// of the project's prompts (ProjectSpec::prompts) with the new weights:
// kSampleTokens tokens, sampled with a fixed seed per prompt, so that the
// checkpoints of one project compare like with like. The result is the
// checkpoint's samples.json (docs/protocol.md, 12.5).
//
// The same thread then runs what start() is given to do after (the
// checkpoint's export, in ProjectRuntime), so that the loop never writes
// one either.
//
// The model is touched only by the evaluation in progress (or by evaluate()
// on the loop's thread when none is running). A failed evaluation (an
// exception) gives no loss; it is logged and never throws out of finish().

#include "engine/data_set.h"
#include "engine/gpt.h"
#include "engine/tokenizer.h"
#include "net/coordinator/checkpoint_store.h"
#include "net/coordinator/project_spec.h"
#include "net/wire/events.h"

#include <functional>
#include <future>
#include <memory>
#include <optional>

namespace crowdtrain::coordinator {

class Evaluation {
public:
    // `faultPoint`: see RuntimeOptions (tests only).
    Evaluation(const ProjectSpec& spec, const engine::DataSet& data, engine::Gpt model,
        std::function<void(std::string_view, int64_t)> faultPoint);
    ~Evaluation();

    static constexpr int64_t kSampleTokens = 48;
    static constexpr double kSampleTemperature = 0.8;
    static constexpr int64_t kSampleTopK = 40;
    static constexpr uint64_t kSampleSeed = 20240520;

    // Synchronously, on the caller's thread (version 0 at the first start).
    std::optional<double> evaluate(const std::vector<float>& params);
    // samples.json for these weights: {"round", "seed", "temperature",
    // "top_k", "max_tokens", "samples": [{"prompt", "text"}, ...]}; "" when
    // the project has no prompts or no tokenizer. On the caller's thread.
    std::string writeSamples(int64_t round, const std::vector<float>& params);

    struct Done {
        int64_t round = 0;
        int64_t tokens = 0;
        std::shared_ptr<const std::vector<float>> params;
        net::RoundClosedEvent event; // valLoss filled in
        std::optional<double> valLoss;
        std::string samplesJson; // "" unless asked for and possible
        // What `after` made: the checkpoint (or why there is none) and the
        // bytes it wrote.
        std::optional<CheckpointInfo> checkpoint;
        std::string checkpointError;
        uint64_t bytesWritten = 0;
    };
    // Run on the evaluation thread once the loss (and samples) are in `done`;
    // what it throws is logged, the evaluation stands.
    using After = std::function<void(Done& done)>;
    // Starts the evaluation of a committed round (finish() the previous one
    // first); `withSamples`: continue the prompts too (a checkpoint is due).
    void start(int64_t round, int64_t tokens, std::shared_ptr<const std::vector<float>> params,
        net::RoundClosedEvent event, bool withSamples, After after = {});
    // The finished evaluation, if one is finished (with `wait`: waits for a running one).
    std::optional<Done> finish(bool wait);
    bool running() const { return m_running.has_value(); }

private:
    struct Outcome {
        std::optional<double> loss;
        std::string samplesJson;
        std::string failure; // why there is no loss
        Done after; // the checkpoint's fields, when `after` ran
    };
    struct Running {
        Done done;
        std::future<Outcome> outcome;
    };

    const ProjectSpec& m_spec;
    const engine::DataSet& m_data;
    engine::Gpt m_model;
    std::unique_ptr<engine::Tokenizer> m_tokenizer; // for the prompts; null without them
    std::function<void(std::string_view, int64_t)> m_faultPoint;
    std::optional<Running> m_running;
};

} // namespace crowdtrain::coordinator
