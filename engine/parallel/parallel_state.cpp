// ParallelTrainer's checkpoints: the whole model and AdamW moments gathered
// from every rank's part, written by rank 0 as one torch archive:
//   "meta"            JSON string: format "crowdtrain-parallel-state",
//                     version 1, model config, step, tokens seen, seed,
//                     data positions, the parameter names in order
//   "param/<i>"       parameter i (gptParameterShapes() order), fp32
//   "exp_avg/<i>"     AdamW's first moment of parameter i
//   "exp_avg_sq/<i>"  its second moment
// Any layout (ranks, ZeRO stage, tensor or pipeline degree) reads it and
// takes its own part.
#include "core/file_io.h"
#include "engine/error_codes.h"
#include "engine/hf_gpt2.h"
#include "engine/parallel/parallel_trainer.h"

#include <nlohmann/json.hpp>
#include <sstream>

namespace crowdtrain::engine::parallel {
namespace {

constexpr const char* kFormat = "crowdtrain-parallel-state";

nlohmann::json configJson(const GptConfig& c)
{
    return {{"n_layer", c.nLayer}, {"n_head", c.nHead}, {"n_embd", c.nEmbd}, {"block_size", c.blockSize},
        {"vocab_size", c.vocabSize}, {"dropout", c.dropout}};
}

const char* prefixOf(ZeroOptimizer::State which)
{
    switch (which) {
    case ZeroOptimizer::State::Parameters:
        return "param/";
    case ZeroOptimizer::State::ExpAvg:
        return "exp_avg/";
    case ZeroOptimizer::State::ExpAvgSq:
        return "exp_avg_sq/";
    case ZeroOptimizer::State::Gradients:
        return "grad/";
    }
    return "";
}

} // namespace

std::map<std::string, torch::Tensor> ParallelTrainer::wholeState(ZeroOptimizer::State which)
{
    std::map<std::string, torch::Tensor> whole;
    for (auto& [name, part] : m_zero->fullTensors(which))
        whole[name] = m_model->wholeOf(name, part).to(torch::kCPU);
    if (m_mesh->stages() == 1)
        return whole;
    // Each stage holds its own blocks: the owner stage's first rank
    // broadcasts each tensor (its data-parallel peers hold the same).
    for (const auto& [name, shape] : gptParameterShapes(m_options.model)) {
        const int owner = ownerStage(name);
        const auto options = torch::TensorOptions().dtype(torch::kFloat).device(m_mesh->world().device());
        torch::Tensor t = owner == m_mesh->stage() ? whole.at(name).to(options.device()) : torch::empty(shape, options);
        m_mesh->world().broadcast(t, owner * (m_mesh->worldSize() / m_mesh->stages()));
        whole[name] = t.cpu();
    }
    return whole;
}

NamedParameters ParallelTrainer::wholeParameters()
{
    auto whole = wholeState(ZeroOptimizer::State::Parameters);
    NamedParameters result;
    for (const auto& [name, shape] : gptParameterShapes(m_options.model))
        if (whole.contains(name))
            result.emplace_back(name, whole.at(name));
    return result;
}

Status ParallelTrainer::saveState(const std::filesystem::path& file)
{
    try {
        const auto states
            = {ZeroOptimizer::State::Parameters, ZeroOptimizer::State::ExpAvg, ZeroOptimizer::State::ExpAvgSq};
        torch::serialize::OutputArchive archive;
        nlohmann::json names = nlohmann::json::array();
        for (const auto which : states) {
            auto whole = wholeState(which);
            int index = 0;
            if (m_mesh->rank() == 0)
                for (const auto& [name, shape] : gptParameterShapes(m_options.model))
                    archive.write(prefixOf(which) + std::to_string(index++), whole.at(name));
        }
        if (m_mesh->rank() != 0)
            return Status::success();
        for (const auto& [name, shape] : gptParameterShapes(m_options.model))
            names.push_back(name);
        nlohmann::json meta = {{"format", kFormat}, {"version", 1}, {"model", configJson(m_options.model)},
            {"step", m_step}, {"adamw_steps", m_zero->stepCount()}, {"tokens_seen", m_tokensSeen},
            {"seed", m_options.seed}, {"names", names},
            {"positions",
                {{"train", m_data.train->position()},
                    {"train_eval", m_data.trainEval ? m_data.trainEval->position() : 0},
                    {"val", m_data.val ? m_data.val->position() : 0}}}};
        archive.write("meta", c10::IValue(meta.dump()));
        std::ostringstream bytes;
        archive.save_to(bytes);
        return core::writeFileAtomic(file, bytes.str());
    } catch (const std::exception& e) {
        return Error::make(
            errc::kSaveFailed, "cannot save the parallel training state to " + file.string() + ": " + e.what());
    }
}

Status ParallelTrainer::loadState(const std::filesystem::path& file)
{
    auto corrupt
        = [&](const std::string& what) { return Error::make(errc::kBadCheckpoint, file.string() + ": " + what); };
    std::map<std::string, torch::Tensor> parts[3];
    nlohmann::json meta;
    int64_t adamwSteps = 0, step = 0, tokensSeen = 0;
    uint64_t trainAt = 0, trainEvalAt = 0, valAt = 0;
    try {
        torch::serialize::InputArchive archive;
        archive.load_from(file.string());
        c10::IValue metaValue;
        archive.read("meta", metaValue);
        meta = nlohmann::json::parse(metaValue.toStringRef());
        if (meta.at("format") != kFormat || meta.at("version") != 1)
            return corrupt("not a crowdtrain parallel training state (version 1)");
        if (meta.at("model") != configJson(m_options.model))
            return corrupt(
                "saved for model " + meta.at("model").dump() + ", not " + configJson(m_options.model).dump());
        const auto states
            = {ZeroOptimizer::State::Parameters, ZeroOptimizer::State::ExpAvg, ZeroOptimizer::State::ExpAvgSq};
        int which = 0;
        for (const auto state : states) {
            int index = 0;
            for (const auto& [name, shape] : gptParameterShapes(m_options.model)) {
                torch::Tensor whole;
                archive.read(prefixOf(state) + std::to_string(index++), whole);
                if (whole.sizes() != c10::IntArrayRef(shape) || whole.scalar_type() != torch::kFloat)
                    return corrupt(name + " has the wrong shape or type");
                parts[which][name] = m_model->localPart(name, whole).to(m_device);
            }
            ++which;
        }
        adamwSteps = meta.at("adamw_steps").get<int64_t>();
        step = meta.at("step").get<int64_t>();
        tokensSeen = meta.at("tokens_seen").get<int64_t>();
        const auto& positions = meta.at("positions");
        trainAt = positions.at("train").get<uint64_t>();
        trainEvalAt = positions.at("train_eval").get<uint64_t>();
        valAt = positions.at("val").get<uint64_t>();
    } catch (const c10::Error& e) {
        return corrupt(std::string("cannot read: ") + e.what_without_backtrace());
    } catch (const std::exception& e) {
        return corrupt(std::string("cannot read: ") + e.what());
    }
    m_zero->load(parts[0], parts[1], parts[2], adamwSteps);
    m_step = step;
    m_tokensSeen = tokensSeen;
    m_data.train->setPosition(trainAt);
    if (m_data.trainEval)
        m_data.trainEval->setPosition(trainEvalAt);
    if (m_data.val)
        m_data.val->setPosition(valAt);
    return Status::success();
}

Status ParallelTrainer::assignParameters(const std::map<std::string, torch::Tensor>& whole)
{
    std::map<std::string, torch::Tensor> parts;
    for (const auto& [name, shape] : gptParameterShapes(m_options.model)) {
        auto found = whole.find(name);
        if (found == whole.end() || found->second.sizes() != c10::IntArrayRef(shape))
            return Error::make(errc::kBadSize, name + " is missing or has another shape");
        parts[name] = m_model->localPart(name, found->second).to(m_device, torch::kFloat);
    }
    m_zero->assignParameters(parts);
    return Status::success();
}

Status ParallelTrainer::exportHuggingFace(const std::filesystem::path& dir)
{
    const NamedParameters whole = wholeParameters();
    if (m_mesh->rank() != 0)
        return Status::success();
    return exportHuggingFaceGpt2(dir, m_options.model, whole, {{"step", std::to_string(m_step)}});
}

} // namespace crowdtrain::engine::parallel
