#include "net/coordinator/project_spec.h"
#include "net/wire/error_codes.h"

#include "core/file_io.h"
#include "engine/data_set.h"
#include "engine/hf_gpt2_config.h"
#include "engine/tokenizer.h"
#include "net/coordinator/data_plan.h"
#include "net/wire/text_checks.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <initializer_list>
#include <limits>

namespace crowdtrain::coordinator {
namespace {

using nlohmann::json;

// Reads one JSON object's fields; every error names the file and the
// dotted field path, and the first one found is kept.
class FieldReader {
public:
    FieldReader(std::string file, std::string prefix)
        : m_file(std::move(file))
        , m_prefix(std::move(prefix))
    { }

    Error error(const std::string& field, const std::string& message) const
    {
        return Error::make(net::errc::kBadSpec, m_file + ": " + m_prefix + field + ": " + message);
    }

    // Unknown keys are errors: a misspelt optional field would otherwise be
    // ignored and its default used without a word.
    std::optional<Error> checkKeys(const json& object, std::initializer_list<const char*> known) const
    {
        for (const auto& [key, value] : object.items()) {
            if (std::none_of(known.begin(), known.end(), [&](const char* k) { return key == k; }))
                return error(key, "unknown field");
        }
        return std::nullopt;
    }

    std::optional<Error> integer(const json& object, const char* field, int64_t& out, int64_t min,
        int64_t max = std::numeric_limits<int64_t>::max()) const
    {
        if (!object.contains(field))
            return std::nullopt;
        const json& v = object[field];
        if (!v.is_number_integer())
            return error(field, "must be an integer");
        if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
            return error(field, "is too large");
        const int64_t value = v.get<int64_t>();
        if (value < min || value > max)
            return error(field,
                "must be in [" + std::to_string(min) + ", " + std::to_string(max) + "], got " + std::to_string(value));
        out = value;
        return std::nullopt;
    }

    std::optional<Error> number(
        const json& object, const char* field, double& out, double min, double max, bool minInclusive = true) const
    {
        if (!object.contains(field))
            return std::nullopt;
        const json& v = object[field];
        if (!v.is_number())
            return error(field, "must be a number");
        const double value = v.get<double>();
        if (!(minInclusive ? value >= min : value > min) || !(value <= max))
            return error(field,
                std::string("must be in ") + (minInclusive ? "[" : "(") + json(min).dump() + ", " + json(max).dump()
                    + "], got " + v.dump());
        out = value;
        return std::nullopt;
    }

    std::optional<Error> boolean(const json& object, const char* field, bool& out) const
    {
        if (!object.contains(field))
            return std::nullopt;
        if (!object[field].is_boolean())
            return error(field, "must be true or false");
        out = object[field].get<bool>();
        return std::nullopt;
    }

    std::optional<Error> object(const json& parent, const char* field, const json*& out) const
    {
        out = nullptr;
        if (!parent.contains(field))
            return std::nullopt;
        if (!parent[field].is_object())
            return error(field, "must be an object");
        out = &parent[field];
        return std::nullopt;
    }

    FieldReader nested(const char* field) const { return FieldReader(m_file, m_prefix + field + "."); }

private:
    std::string m_file;
    std::string m_prefix;
};

#define CT_TRY(expr)                                                                                                   \
    if (auto failure = (expr))                                                                                         \
        return *failure;

std::optional<Error> parseModel(const FieldReader& top, const json& root, ProjectSpec& spec)
{
    if (!root.contains("model"))
        return top.error("model", "is required");
    const json* model = nullptr;
    CT_TRY(top.object(root, "model", model));
    const FieldReader r = top.nested("model");
    CT_TRY(r.checkKeys(*model, {"preset", "n_layer", "n_head", "n_embd", "block_size", "vocab_size", "dropout"}));
    if (model->contains("preset")) {
        if (!(*model)["preset"].is_string())
            return r.error("preset", "must be a string");
        spec.modelPreset = (*model)["preset"].get<std::string>();
        auto preset = engine::gptConfigByName(spec.modelPreset);
        if (!preset)
            return r.error("preset", preset.error().message);
        spec.model = *preset;
    } else {
        for (const char* field : {"n_layer", "n_head", "n_embd", "block_size", "vocab_size"}) {
            if (!model->contains(field))
                return r.error(field, "is required without a preset");
        }
    }
    // Explicit sizes override a preset's (a preset with a smaller vocab, say).
    CT_TRY(r.integer(*model, "n_layer", spec.model.nLayer, 1, 1024));
    CT_TRY(r.integer(*model, "n_head", spec.model.nHead, 1, 1024));
    CT_TRY(r.integer(*model, "n_embd", spec.model.nEmbd, 1, 65536));
    CT_TRY(r.integer(*model, "block_size", spec.model.blockSize, 1, 1 << 20));
    CT_TRY(r.integer(*model, "vocab_size", spec.model.vocabSize, 1, 65536));
    CT_TRY(r.number(*model, "dropout", spec.model.dropout, 0.0, 0.99));
    if (Status valid = engine::validate(spec.model); !valid)
        return top.error("model", valid.error().message);
    return std::nullopt;
}

std::optional<Error> parseInit(const FieldReader& top, const json& root, ProjectSpec& spec)
{
    const json* init = nullptr;
    CT_TRY(top.object(root, "init", init));
    if (!init)
        return std::nullopt;
    const FieldReader r = top.nested("init");
    CT_TRY(r.checkKeys(*init, {"seed", "import"}));
    if (init->contains("seed") && init->contains("import"))
        return top.error("init", "give either seed or import, not both");
    int64_t seed = int64_t(spec.init.seed);
    CT_TRY(r.integer(*init, "seed", seed, 0));
    spec.init.seed = uint64_t(seed);
    if (init->contains("import")) {
        const json& dir = (*init)["import"];
        if (!dir.is_string() || dir.get<std::string>().empty())
            return r.error("import", "must be a folder path");
        spec.init.importDir = std::filesystem::absolute(spec.file.parent_path() / dir.get<std::string>());
    }
    return std::nullopt;
}

std::optional<Error> parseTraining(const FieldReader& top, const json& root, ProjectSpec& spec)
{
    const json* o = nullptr;
    CT_TRY(top.object(root, "inner", o));
    if (o) {
        const FieldReader r = top.nested("inner");
        CT_TRY(r.checkKeys(*o,
            {"steps", "batch_size", "learning_rate", "min_lr", "warmup_iters", "lr_decay_iters", "beta1", "beta2",
                "weight_decay", "grad_clip"}));
        InnerSpec& in = spec.inner;
        CT_TRY(r.integer(*o, "steps", in.steps, 1, 1'000'000));
        CT_TRY(r.integer(*o, "batch_size", in.batchSize, 1, 1'000'000));
        CT_TRY(r.number(*o, "learning_rate", in.learningRate, 0.0, 10.0, false));
        CT_TRY(r.number(*o, "min_lr", in.minLr, 0.0, 10.0));
        CT_TRY(r.integer(*o, "warmup_iters", in.warmupIters, 0));
        CT_TRY(r.integer(*o, "lr_decay_iters", in.lrDecayIters, 0, int64_t(1) << 50));
        CT_TRY(r.number(*o, "beta1", in.beta1, 0.0, 0.999999));
        CT_TRY(r.number(*o, "beta2", in.beta2, 0.0, 0.999999));
        CT_TRY(r.number(*o, "weight_decay", in.weightDecay, 0.0, 10.0));
        CT_TRY(r.number(*o, "grad_clip", in.gradClip, 0.0, 1e6));
        if (in.minLr > in.learningRate)
            return r.error("min_lr", "must not exceed learning_rate");
    }
    CT_TRY(top.object(root, "outer", o));
    if (o) {
        const FieldReader r = top.nested("outer");
        CT_TRY(r.checkKeys(*o, {"lr", "momentum", "nesterov"}));
        CT_TRY(r.number(*o, "lr", spec.outer.lr, 0.0, 10.0, false));
        CT_TRY(r.number(*o, "momentum", spec.outer.momentum, 0.0, 0.999999));
        CT_TRY(r.boolean(*o, "nesterov", spec.outer.nesterov));
    }
    CT_TRY(top.object(root, "round", o));
    if (o) {
        const FieldReader r = top.nested("round");
        CT_TRY(r.checkKeys(*o, {"token_target", "deadline_seconds", "wrap_up"}));
        int64_t target = 0;
        CT_TRY(r.integer(*o, "token_target", target, 0));
        spec.round.tokenTarget = uint64_t(target);
        CT_TRY(r.integer(*o, "deadline_seconds", spec.round.deadlineSeconds, 1, 7 * 24 * 3600));
        CT_TRY(r.boolean(*o, "wrap_up", spec.round.wrapUp));
    }
    return std::nullopt;
}

// "sparse": {"chunk", "k", "decay", "down_k", "update_bits"}, only with
// "codec": "sparse".
// Error feedback on the volunteers plays the outer momentum, so
// outer.momentum defaults to 0 there. outer.lr defaults to 4 with the union
// update: each coordinate of the average is mostly one volunteer's value
// divided by the round's submissions, and 4 (with decay 0.8) ended 9 %
// lower than 1 (bench/RESULTS.md, "Home links, session 14"); to 1 with the
// coordinator's re-sparsified update, whose own error feedback keeps what
// it holds back. Momentum is allowed when
// the coordinator re-sparsifies (down_k > 0), since its own error feedback
// keeps the update sparse; with the union (down_k 0) it must be 0.
std::optional<Error> parseSparse(const FieldReader& top, const json& root, ProjectSpec& spec)
{
    const json* o = nullptr;
    CT_TRY(top.object(root, "sparse", o));
    if (spec.codec != Codec::Sparse) {
        if (o)
            return top.error("sparse", "is only for \"codec\": \"sparse\"");
        return std::nullopt;
    }
    if (o) {
        const FieldReader r = top.nested("sparse");
        CT_TRY(r.checkKeys(*o, {"chunk", "k", "decay", "down_k", "update_bits"}));
        CT_TRY(r.integer(*o, "chunk", spec.sparse.chunk, 64, 32768));
        CT_TRY(r.integer(*o, "k", spec.sparse.k, 1, 32768));
        CT_TRY(r.number(*o, "decay", spec.sparse.decay, 0.0, 1.0));
        CT_TRY(r.integer(*o, "down_k", spec.sparseDownK, 0, 32768));
        int64_t updateBits = spec.sparse.updateBits;
        CT_TRY(r.integer(*o, "update_bits", updateBits, 4, 8));
        spec.sparse.updateBits = int(updateBits);
        if (Status ok = diloco::checkSparseOptions(spec.sparse); !ok)
            return top.error("sparse", ok.error().message);
        if (spec.sparseDownK > spec.sparse.chunk)
            return top.error("sparse.down_k", "must not exceed chunk (" + std::to_string(spec.sparse.chunk) + ")");
    }
    const json* outer = root.contains("outer") && root["outer"].is_object() ? &root["outer"] : nullptr;
    if (!outer || !outer->contains("momentum"))
        spec.outer.momentum = 0.0;
    else if (spec.outer.momentum != 0.0 && spec.sparseDownK == 0)
        return top.error("outer.momentum", "must be 0 with the sparse codec's union update (sparse.down_k 0)");
    if (!outer || !outer->contains("lr"))
        spec.outer.lr = spec.sparseDownK == 0 ? 4.0 : 1.0;
    return std::nullopt;
}

std::optional<Error> parseOutputs(const FieldReader& top, const json& root, ProjectSpec& spec)
{
    if (root.contains("codec")) {
        const json& codec = root["codec"];
        const auto parsed = codec.is_string() ? diloco::parseCodec(codec.get<std::string>())
                                              : Result<Codec>(Error::make(net::errc::kBadCodec, "not a string"));
        if (!parsed)
            return top.error("codec", "must be \"int8\", \"fp16\", \"fp32\" or \"sparse\", got " + codec.dump());
        spec.codec = *parsed;
    }
    const json* o = nullptr;
    CT_TRY(parseSparse(top, root, spec));
    CT_TRY(top.object(root, "checkpoints", o));
    if (o) {
        const FieldReader r = top.nested("checkpoints");
        CT_TRY(r.checkKeys(*o, {"every_rounds", "keep_last", "milestone_every"}));
        CT_TRY(r.integer(*o, "every_rounds", spec.checkpoints.everyRounds, 1));
        CT_TRY(r.integer(*o, "keep_last", spec.checkpoints.keepLast, 1));
        CT_TRY(r.integer(*o, "milestone_every", spec.checkpoints.milestoneEvery, 0));
    }
    CT_TRY(top.object(root, "validation", o));
    if (o) {
        const FieldReader r = top.nested("validation");
        CT_TRY(r.checkKeys(*o, {"batches", "batch_size"}));
        CT_TRY(r.integer(*o, "batches", spec.validation.batches, 0, 1'000'000));
        CT_TRY(r.integer(*o, "batch_size", spec.validation.batchSize, 1, 1'000'000));
    }
    return std::nullopt;
}

} // namespace

uint64_t ProjectSpec::tokensPerTask() const
{
    return uint64_t(inner.steps) * uint64_t(inner.batchSize) * uint64_t(model.blockSize) + 1;
}

uint64_t ProjectSpec::windowsPerPiece() const
{
    const uint64_t windows = uint64_t(inner.steps) * uint64_t(inner.batchSize);
    return (windows + kMaxPiecesPerTask - 1) / kMaxPiecesPerTask;
}

uint32_t ProjectSpec::piecesPerTask() const
{
    const uint64_t windows = uint64_t(inner.steps) * uint64_t(inner.batchSize);
    return uint32_t((windows + windowsPerPiece() - 1) / windowsPerPiece());
}

uint64_t ProjectSpec::tokensPerPiece() const
{
    return windowsPerPiece() * uint64_t(model.blockSize) + 1;
}

uint64_t ProjectSpec::roundTokenTarget() const
{
    return round.tokenTarget > 0 ? round.tokenTarget : tokensPerTask();
}

namespace {

// What a volunteer sees before joining: the goal, the license and who may
// download checkpoints, and the prompts the coordinator continues at each
// checkpoint.
std::optional<Error> parseTerms(const FieldReader& top, const json& root, ProjectSpec& spec)
{
    if (root.contains("token_goal")) {
        if (!root["token_goal"].is_number_unsigned())
            return top.error("token_goal", "must be a whole number of tokens >= 0 (0: no goal)");
        spec.tokenGoal = root["token_goal"].get<uint64_t>();
    }
    if (root.contains("license")) {
        if (!root["license"].is_string() || root["license"].get<std::string>().size() > 256)
            return top.error("license", "must be a string of at most 256 bytes (an SPDX id or a short text)");
        spec.license = root["license"].get<std::string>();
    }
    if (root.contains("checkpoint_access")) {
        const auto access = root["checkpoint_access"].is_string()
            ? parseCheckpointAccess(root["checkpoint_access"].get<std::string>())
            : std::nullopt;
        if (!access)
            return top.error("checkpoint_access", "must be \"everyone\", \"participants\" or \"nobody\"");
        spec.checkpointAccess = *access;
    }
    if (root.contains("prompts")) {
        const json& prompts = root["prompts"];
        if (!prompts.is_array() || prompts.size() > ProjectSpec::kMaxPrompts)
            return top.error(
                "prompts", "must be a list of at most " + std::to_string(ProjectSpec::kMaxPrompts) + " strings");
        for (const json& prompt : prompts) {
            if (!prompt.is_string() || prompt.get<std::string>().empty() || prompt.get<std::string>().size() > 256)
                return top.error("prompts", "each prompt must be a string of 1 to 256 bytes");
            spec.prompts.push_back(prompt.get<std::string>());
        }
    }
    return std::nullopt;
}

// "trust": {"keys": [Z85 public keys], "new_key_share": s in [0, 1],
//           "calibrate": bool, "defences": bool,
//           "evaluate": {"rate": r in [0, 1], "tokens": n >= 1}}.
std::optional<Error> parseTrust(const FieldReader& top, const json& root, ProjectSpec& spec)
{
    const json* o = nullptr;
    CT_TRY(top.object(root, "trust", o));
    if (!o)
        return std::nullopt;
    const FieldReader r = top.nested("trust");
    CT_TRY(r.checkKeys(*o, {"keys", "new_key_share", "calibrate", "defences", "evaluate"}));
    CT_TRY(r.number(*o, "new_key_share", spec.trust.newKeyShare, 0.0, 1.0));
    CT_TRY(r.boolean(*o, "calibrate", spec.trust.calibrate));
    CT_TRY(r.boolean(*o, "defences", spec.trust.defences));
    const json* evaluate = nullptr;
    CT_TRY(r.object(*o, "evaluate", evaluate));
    if (evaluate) {
        const FieldReader e = r.nested("evaluate");
        CT_TRY(e.checkKeys(*evaluate, {"rate", "tokens"}));
        CT_TRY(e.number(*evaluate, "rate", spec.trust.evaluateRate, 0.0, 1.0));
        CT_TRY(e.integer(*evaluate, "tokens", spec.trust.evaluateTokens, 1, TrustSpec::kMaxEvaluateTokens));
    }
    if (!o->contains("keys"))
        return std::nullopt;
    const json& keys = (*o)["keys"];
    if (!keys.is_array() || keys.size() > TrustSpec::kMaxKeys)
        return r.error("keys", "must be a list of at most " + std::to_string(TrustSpec::kMaxKeys) + " public keys");
    static constexpr std::string_view kZ85
        = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";
    for (const json& key : keys) {
        const bool z85 = key.is_string() && key.get<std::string>().size() == 40
            && key.get<std::string>().find_first_not_of(kZ85) == std::string::npos;
        if (!z85)
            return r.error("keys", "each key must be a Z85 public key of 40 characters, got " + key.dump());
        spec.trust.keys.push_back(key.get<std::string>());
    }
    return std::nullopt;
}

} // namespace

std::string TrustSpec::unprotected() const
{
    if (!defences)
        return "the submission gate's defences are off (trust.defences: false, for benchmarks): any key's update "
               "counts as long as it is finite and under the absolute bounds";
    if (!keys.empty() || calibrate || evaluateRate > 0)
        return {};
    return "no key is trusted and the project neither calibrates nor evaluates: until some key has earned trust, the "
           "first round's keys set the gate's statistics, so fresh keys sent by one person can take the project over "
           "from its first round and refuse honest volunteers; name the host's own worker in trust.keys, or set "
           "trust.calibrate (small models) or trust.evaluate";
}

std::string ProjectSpec::unprotected() const
{
    if (std::string why = trust.unprotected(); !why.empty())
        return why;
    if (codec == Codec::Sparse && trust.evaluateRate <= 0)
        return "the sparse codec has no direction check, and its bounds on norm and elements cannot tell a \"flat\" "
               "update (the signs of an honest one, every element at one magnitude) from honest work, so keys that "
               "send such updates are accepted and earn trust (two of six such keys cost 4% of the loss after 60 "
               "rounds on the attack bench); set trust.evaluate (with rate 1 every such update was refused there)";
    return {};
}

Result<ProjectSpec> parseProjectSpec(std::string_view text, const std::filesystem::path& specFile)
{
    ProjectSpec spec;
    spec.file = std::filesystem::absolute(specFile);
    const std::string fileName = spec.file.string();
    json root;
    try {
        root = json::parse(text);
    } catch (const json::exception& e) {
        return Error::make(net::errc::kBadSpec, fileName + ": not valid JSON: " + e.what());
    }
    if (!root.is_object())
        return Error::make(net::errc::kBadSpec, fileName + ": must hold a JSON object");
    const FieldReader top(fileName, "");
    CT_TRY(top.checkKeys(root,
        {"name", "description", "model", "data", "init", "inner", "outer", "round", "codec", "sparse", "checkpoints",
            "validation", "token_goal", "license", "checkpoint_access", "prompts", "trust"}));

    if (!root.contains("name") || !root["name"].is_string())
        return top.error("name", "is required (a string)");
    spec.name = root["name"].get<std::string>();
    if (!net::isProjectName(spec.name))
        return top.error("name", "must be 1 to 64 characters of a-z, 0-9 and '-', got \"" + spec.name + "\"");
    if (root.contains("description")) {
        if (!root["description"].is_string())
            return top.error("description", "must be a string");
        spec.description = root["description"].get<std::string>();
    }
    CT_TRY(parseTerms(top, root, spec));
    CT_TRY(parseTrust(top, root, spec));
    CT_TRY(parseModel(top, root, spec));
    if (!root.contains("data") || !root["data"].is_string() || root["data"].get<std::string>().empty())
        return top.error("data", "is required (the path of a folder written by crowdtrain-prepare)");
    spec.dataDir = std::filesystem::absolute(spec.file.parent_path() / root["data"].get<std::string>());
    CT_TRY(parseInit(top, root, spec));
    CT_TRY(parseTraining(top, root, spec));
    CT_TRY(parseOutputs(top, root, spec));
    return spec;
}

std::string_view checkpointAccessName(CheckpointAccess access)
{
    switch (access) {
    case CheckpointAccess::Everyone:
        return "everyone";
    case CheckpointAccess::Participants:
        return "participants";
    case CheckpointAccess::Nobody:
        return "nobody";
    }
    return "nobody";
}

std::optional<CheckpointAccess> parseCheckpointAccess(std::string_view name)
{
    for (CheckpointAccess access :
        {CheckpointAccess::Everyone, CheckpointAccess::Participants, CheckpointAccess::Nobody})
        if (checkpointAccessName(access) == name)
            return access;
    return std::nullopt;
}

Status checkProjectData(const ProjectSpec& spec)
{
    const std::string where = spec.file.string() + ": ";
    auto data = engine::openDataSet(spec.dataDir);
    if (!data)
        return Error::make(net::errc::kBadSpec, where + "data: " + data.error().message);
    if (data->tokenizerDir) {
        auto tokenizer = engine::loadTokenizer(*data->tokenizerDir);
        if (!tokenizer)
            return Error::make(net::errc::kBadSpec, where + "data: " + tokenizer.error().message);
        if ((*tokenizer)->vocabSize() > spec.model.vocabSize)
            return Error::make(net::errc::kBadSpec,
                where + "model.vocab_size: " + std::to_string(spec.model.vocabSize) + " is smaller than the "
                    + std::to_string((*tokenizer)->vocabSize()) + " tokens of the tokenizer in "
                    + data->tokenizerDir->string());
    }
    if (auto plan = DataPlan::create(*data, spec.tokensPerPiece(), spec.init.seed, 1, spec.piecesPerTask()); !plan)
        return Error::make(net::errc::kBadSpec,
            where + "inner: a task needs " + std::to_string(spec.piecesPerTask()) + " pieces of "
                + std::to_string(spec.tokensPerPiece()) + " tokens (steps * batch_size windows of block_size + 1) in "
                + spec.dataDir.string() + ": " + plan.error().message);
    if (spec.validation.batches > 0 && data->valTokens() <= uint64_t(spec.model.blockSize))
        return Error::make(net::errc::kBadSpec,
            where
                + "validation: the data folder has no val shard longer than block_size (set validation.batches "
                  "to 0 to validate nothing)");
    if (spec.init.importDir) {
        const auto configFile = *spec.init.importDir / "config.json";
        auto text = core::readFile(configFile);
        if (!text)
            return Error::make(net::errc::kBadSpec, where + "init.import: " + text.error().message);
        auto config = engine::parseHuggingFaceGpt2Config(*text, configFile.string());
        if (!config)
            return Error::make(net::errc::kBadSpec, where + "init.import: " + config.error().message);
        engine::GptConfig expected = spec.model;
        config->dropout = expected.dropout; // dropout does not change the weights
        if (!(*config == expected))
            return Error::make(
                net::errc::kBadSpec, where + "init.import: " + configFile.string() + " describes another model");
    }
    return Status::success();
}

Result<ProjectSpec> loadProjectSpec(const std::filesystem::path& specFile)
{
    auto text = core::readFile(specFile);
    if (!text)
        return text.error();
    auto spec = parseProjectSpec(*text, specFile);
    if (!spec)
        return spec.error();
    if (Status data = checkProjectData(*spec); !data)
        return data.error();
    return spec;
}

} // namespace crowdtrain::coordinator
