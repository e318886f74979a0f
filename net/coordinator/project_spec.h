#pragma once

// A training project as its host describes it: a JSON file naming the model,
// the prepared data folder, the initial weights and the DiLoCo
// hyper-parameters. Every optional field has a default; unknown fields are
// errors (a typo must not silently fall back to a default). Errors name the
// file and the field ("spec.json: inner.steps: must be >= 1").
//
//   {"name": "tiny-shakespeare", "description": "...",
//    "model": {"preset": "tiny"}  or  {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 32, "vocab_size": 65},
//    "data": "data/shakespeare",            relative to the spec file's folder
//    "init": {"seed": 1337}  or  {"import": "hf-gpt2-dir"},
//    "inner": {"steps": 100, "batch_size": 8, "learning_rate": 6e-4, "min_lr": 6e-5, "warmup_iters": 10,
//              "lr_decay_iters": 0, "beta1": 0.9, "beta2": 0.95, "weight_decay": 0.1, "grad_clip": 1.0},
//    "outer": {"lr": 0.7, "momentum": 0.8, "nesterov": true},
//    "round": {"token_target": 0, "deadline_seconds": 600, "wrap_up": true},
//    "codec": "int8",                       or "sparse", with
//    "sparse": {"chunk": 4096, "k": 64, "decay": 0.8, "down_k": 0, "update_bits": 4},
//                                         (outer momentum then defaults to 0, lr to 4 with
//                                          the union update (down_k 0) and to 1 with down_k)
//    "checkpoints": {"every_rounds": 10, "keep_last": 5, "milestone_every": 100},
//    "validation": {"batches": 20, "batch_size": 8},
//    "token_goal": 0, "license": "CC-BY-4.0", "checkpoint_access": "everyone",
//    "prompts": ["ROMEO:"]}
//
// Plain data; thread-safe to copy.

#include "core/result.h"
#include "engine/diloco/codec.h"
#include "engine/diloco/sparse_codec.h"
#include "engine/gpt_config.h"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace crowdtrain::coordinator {

// The payload codec of a project's pseudo-gradients: the engine's type and
// names (diloco::codecName, diloco::parseCodec), the only ones there are.
using Codec = diloco::Codec;

struct InitSpec {
    uint64_t seed = 1337; // theta_0 drawn with this torch seed
    std::optional<std::filesystem::path> importDir; // or imported from a HF GPT-2 folder (absolute)
};

struct InnerSpec {
    int64_t steps = 100; // H: inner AdamW steps per task
    int64_t batchSize = 8; // sequences per inner step
    double learningRate = 6e-4;
    double minLr = 6e-5;
    int64_t warmupIters = 0;
    // Global inner steps (rounds * steps) over which the rate decays to
    // minLr, as nanoGPT's lr_decay_iters; 0: constant after the warmup.
    int64_t lrDecayIters = 0;
    double beta1 = 0.9;
    double beta2 = 0.95;
    double weightDecay = 0.1;
    double gradClip = 1.0; // 0 disables clipping
};

struct OuterSpec {
    double lr = 0.7;
    // 0.8: lower loss than 0.9 after 20 and 60 rounds, and a quarter of
    // 0.9's loss cost when volunteers overlap (bench/RESULTS.md, "Home
    // links, session 14").
    double momentum = 0.8;
    bool nesterov = true;
};

struct RoundSpec {
    uint64_t tokenTarget = 0; // 0: one task's worth of tokens (a round closes after one submission)
    int64_t deadlineSeconds = 600; // how long a volunteer has to submit its task
    // Once every task of the round is handed out and a volunteer that
    // delivered asks for more, the holders of the others are asked to submit
    // the steps they have done (fast and slow volunteers then train for the
    // same wall time).
    bool wrapUp = true;
};

// Who the submission gate trusts before any work (docs/architecture.md
// "Trust and Sybils").
struct TrustSpec {
    // Volunteer public keys (Z85, 40 characters: the "public" line of a
    // worker's key file) the host vouches for, its own workers say: they
    // set the gate's statistics from the first round on.
    std::vector<std::string> keys;
    // The most of a round's weight new keys (without earned trust) take
    // together, when keys with trust have work in it.
    double newKeyShare = 0.25;
    // The coordinator trains one task per round itself and its measure sets
    // the gate's reference as a named key's would (HostCalibration).
    bool calibrate = false;
    // Benchmarks only (bench/attack_swarm.sh's honest cost): false turns the
    // gate's defences off (the reference bounds on norm and direction, the
    // per-element bounds, the copy check, the new keys' cap, clipping); the
    // absolute norm bounds and the finiteness check stay.
    bool defences = true;
    // Evaluated contributions (SubmissionScorer): the share of submissions
    // the coordinator scores by the loss change they buy on held-out
    // windows of the validation split it draws per round (0: none, the
    // default; each score costs a forward pass over `evaluateTokens`), and
    // how many tokens each score reads.
    double evaluateRate = 0.0;
    int64_t evaluateTokens = 4096;
    static constexpr int64_t kMaxEvaluateTokens = int64_t(1) << 20;
    static constexpr std::size_t kMaxKeys = 1024;

    // Empty when something the attacker cannot set judges the first
    // rounds (a named key, the host's calibration, evaluated
    // contributions); else why fresh keys can take the project over, and
    // what the host can do about it: the server logs it at start and the
    // page shows it (issue 42: four fresh keys destroyed such a project).
    std::string unprotected() const;
};

struct CheckpointSpec {
    int64_t everyRounds = 10; // publish every N rounds
    int64_t keepLast = 5; // the last K published checkpoints are kept
    int64_t milestoneEvery = 0; // and every round divisible by this (0: none)
};

struct ValidationSpec {
    int64_t batches = 20;
    int64_t batchSize = 8;
};

// Who may download a project's checkpoints (the coordinator enforces it).
enum class CheckpointAccess {
    Everyone,
    Participants, // keys with at least one accepted submission
    Nobody, // until the host changes the spec (a release)
};
std::string_view checkpointAccessName(CheckpointAccess access);
std::optional<CheckpointAccess> parseCheckpointAccess(std::string_view name);

struct ProjectSpec {
    std::filesystem::path file; // the spec file, absolute
    std::string name; // slug [a-z0-9-]{1,64}
    std::string description;
    std::string modelPreset; // empty for a custom size
    engine::GptConfig model;
    std::filesystem::path dataDir; // absolute
    InitSpec init;
    InnerSpec inner;
    OuterSpec outer;
    RoundSpec round;
    TrustSpec trust;
    Codec codec = Codec::Int8;
    diloco::SparseOptions sparse; // with Codec::Sparse
    // Entries per chunk of the round's update (the coordinator's top-k of
    // its error-feedback buffer); 0: the union of the messages' supports,
    // better for a few volunteers (bench/RESULTS.md), dense for hundreds.
    int64_t sparseDownK = 0;
    CheckpointSpec checkpoints;
    ValidationSpec validation;
    uint64_t tokenGoal = 0; // tokens the project means to train (0: no goal)
    std::string license; // of the published checkpoints: an SPDX id or a short text
    CheckpointAccess checkpointAccess = CheckpointAccess::Everyone;
    // Continued at each checkpoint with a fixed seed, so volunteers can see
    // the writing change round by round.
    static constexpr std::size_t kMaxPrompts = 8;
    std::vector<std::string> prompts;

    // Tokens one task trains on: H * batch * block + 1 (the targets of the
    // last window need one token more).
    uint64_t tokensPerTask() const;
    // How a task's data is cut (see DataPlan): H * batch windows spread over
    // at most kMaxPiecesPerTask pieces of equal size, each a whole number of
    // windows + 1 token; the pieces may hold a few windows more than the
    // task trains on.
    static constexpr uint64_t kMaxPiecesPerTask = 64;
    uint64_t windowsPerPiece() const;
    uint32_t piecesPerTask() const;
    uint64_t tokensPerPiece() const; // windowsPerPiece() * block + 1
    // round.tokenTarget, or tokensPerTask() when it is 0.
    uint64_t roundTokenTarget() const;

    // trust.unprotected(), and with the sparse codec also a project that
    // does not evaluate: its messages are judged by norm and elements only,
    // which a "flat" update keeps (bench/RESULTS.md, session 31). Empty when
    // nothing is known to get through; the server logs it, the page shows it.
    std::string unprotected() const;
};

// Parses and checks every field; relative paths resolve against
// specFile's folder. Does not look at the data folder.
Result<ProjectSpec> parseProjectSpec(std::string_view json, const std::filesystem::path& specFile);

// Opens the data folder (engine::openDataSet) and checks that its tokenizer
// (when it has one; llm.c folders have none) fits the model's vocab_size,
// that one train shard holds at least one task, and that an import folder's
// config.json describes the same model.
Status checkProjectData(const ProjectSpec& spec);

// Reads the file, parses it and checks its data.
Result<ProjectSpec> loadProjectSpec(const std::filesystem::path& specFile);

} // namespace crowdtrain::coordinator
