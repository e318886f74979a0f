#pragma once

// Evaluated contributions (spec `trust.evaluate`, docs/architecture.md
// "Trust and Sybils"): the loss change a submission buys on held-out
// windows its sender did not pick, as Templar's Gauntlet scores its peers.
// The windows are drawn from the project's validation split with a seed the
// coordinator draws at each start, anew for each version, so nobody can
// train for them; theta_v's loss on them is computed once per version, and
// a scored submission's is that of theta_v - decode(payload) (the sender's
// local weights, for an honest one). The norm and element bounds see how
// far an update moves; this sees which way the loss goes.
//
// Costs a forward pass over `trust.evaluate.tokens` per scored submission
// and one more per version (bench/RESULTS.md: 34 s each at GPT-2 124M on a
// 2-core CPU with 8,192 tokens), and P floats for the scored weights.
//
// score() runs on the project's worker (ProjectWorker), inside the
// acceptance's job, so the loop never waits for it; draw() on the loop.
// One score at a time (the worker runs one job at a time).

#include "core/result.h"
#include "engine/data_set.h"
#include "engine/diloco/codec.h"
#include "engine/diloco/sparse_codec.h"
#include "engine/gpt.h"
#include "net/coordinator/project_spec.h"

#include <filesystem>
#include <optional>
#include <random>
#include <vector>

namespace crowdtrain::coordinator {

class SubmissionScorer {
public:
    struct Score {
        int64_t version = 0;
        double before = 0; // theta_v's mean loss on the version's windows
        double after = 0; // theta_v - decode(payload)'s
        double ms = 0; // what scoring it took (theta_v's loss included, the first time of a version)
        double change() const { return after - before; }
    };

    // `sparse`: the layout of a sparse project (outlives this), else null.
    SubmissionScorer(const ProjectSpec& spec, diloco::Codec codec, const diloco::SparseLayout* sparse);

    // Whether to score the next submission (the spec's rate; on the loop).
    bool draw();

    // On the worker: the score of `payload` (a checked upload of the open
    // round) against `theta` of `version`. An error (no validation shard,
    // a read failure) scores nothing; the submission is then judged
    // without it.
    Result<Score> score(int64_t version, const std::vector<float>& theta, const std::filesystem::path& payload);

private:
    Status prepare(int64_t version, const std::vector<float>& theta);
    Result<double> loss(const float* weights, int64_t n);

    const ProjectSpec& m_spec;
    diloco::Codec m_codec;
    const diloco::SparseLayout* m_sparse;
    std::mt19937_64 m_draws; // draw()'s, on the loop
    uint64_t m_seed; // the windows', drawn at each start
    std::optional<engine::DataSet> m_data;
    std::optional<engine::Gpt> m_model; // its parameters are views (borrow)
    std::vector<float> m_local; // theta_v - decode(payload)
    // The windows of m_version and theta_v's loss on them.
    int64_t m_version = -1;
    double m_before = 0;
    std::vector<int64_t> m_x, m_y;
};

} // namespace crowdtrain::coordinator
