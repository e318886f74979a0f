// Trainer::saveState / loadState: the complete training state in one file.
//
// Layout (little-endian):
//   8 bytes  magic "CTTRAIN\0"
//   u32      format version (1)
//   u32      reserved (0)
//   u64      N, then N bytes of JSON: options, model config, step, tokens
//            seen, data-source positions
//   u64      M, then M bytes of a torch archive: "model", "optimizer", "rng"
//   u64      FNV-1a 64 of every byte before it
// The file is written to a temporary name and renamed (core/file_io.h).
#include "core/file_io.h"
#include "engine/error_codes.h"
#include "engine/model_io.h"
#include "engine/trainer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>

namespace crowdtrain::engine {
namespace {

constexpr char kMagic[8] = {'C', 'T', 'T', 'R', 'A', 'I', 'N', '\0'};
constexpr uint32_t kVersion = 1;

uint64_t fnv1a(std::string_view bytes)
{
    uint64_t hash = 0xcbf29ce484222325ull;
    for (unsigned char c : bytes) {
        hash ^= c;
        hash *= 0x100000001b3ull;
    }
    return hash;
}

template <typename T> void put(std::string& out, T value)
{
    out.append(reinterpret_cast<const char*>(&value), sizeof value);
}

// Reads fixed-size fields from a byte string, failing cleanly at its end.
class Reader {
public:
    explicit Reader(std::string_view bytes)
        : m_bytes(bytes)
    { }
    template <typename T> bool get(T& value)
    {
        if (m_bytes.size() - m_offset < sizeof value)
            return false;
        std::memcpy(&value, m_bytes.data() + m_offset, sizeof value);
        m_offset += sizeof value;
        return true;
    }
    bool take(uint64_t n, std::string_view& out)
    {
        if (m_bytes.size() - m_offset < n)
            return false;
        out = m_bytes.substr(m_offset, n);
        m_offset += n;
        return true;
    }
    std::size_t offset() const { return m_offset; }

private:
    std::string_view m_bytes;
    std::size_t m_offset = 0;
};

nlohmann::json configJson(const GptConfig& c)
{
    return {{"n_layer", c.nLayer}, {"n_head", c.nHead}, {"n_embd", c.nEmbd}, {"block_size", c.blockSize},
        {"vocab_size", c.vocabSize}, {"dropout", c.dropout}};
}

torch::Tensor& cpuGeneratorState(torch::Tensor& holder)
{
    holder = at::detail::getDefaultCPUGenerator().get_state();
    return holder;
}

} // namespace

Status Trainer::saveState(const std::filesystem::path& file) const
{
    if (m_options.int8Moments || m_options.bf16HostMaster)
        return Error::make(errc::kBadOptions, "a trainer with 8-bit AdamW moments cannot save its state yet");
    try {
        nlohmann::json meta;
        meta["format"] = "crowdtrain-train-state";
        meta["model"] = configJson(m_options.model);
        meta["step"] = m_step;
        meta["tokens_seen"] = m_tokensSeen;
        meta["seed"] = m_options.seed;
        meta["batch_size"] = m_options.batchSize;
        meta["grad_accumulation_steps"] = m_options.gradAccumulationSteps;
        meta["positions"]
            = {{"train", m_data.train->position()}, {"train_eval", m_data.trainEval ? m_data.trainEval->position() : 0},
                {"val", m_data.val ? m_data.val->position() : 0}};

        torch::serialize::OutputArchive archive;
        torch::serialize::OutputArchive modelArchive;
        torch::serialize::OutputArchive optimizerArchive;
        m_model->save(modelArchive);
        m_optimizer->save(optimizerArchive);
        archive.write("model", modelArchive);
        archive.write("optimizer", optimizerArchive);
        torch::Tensor rng;
        archive.write("rng", cpuGeneratorState(rng), /*is_buffer=*/true);
        std::ostringstream archiveBytes;
        archive.save_to(archiveBytes);

        const std::string json = meta.dump();
        const std::string blob = archiveBytes.str();
        std::string out(kMagic, sizeof kMagic);
        put(out, kVersion);
        put(out, uint32_t(0));
        put(out, uint64_t(json.size()));
        out += json;
        put(out, uint64_t(blob.size()));
        out += blob;
        put(out, fnv1a(out));
        return core::writeFileAtomic(file, out);
    } catch (const std::exception& e) {
        return Error::make(errc::kSaveFailed, "cannot save training state to " + file.string() + ": " + e.what());
    }
}

namespace {

struct StateFile {
    nlohmann::json meta;
    std::string bytes;
    std::size_t blobOffset = 0; // an offset, not a view: `bytes` moves
    std::size_t blobSize = 0;

    std::string_view blob() const { return std::string_view(bytes).substr(blobOffset, blobSize); }
};

Error corruptState(const std::filesystem::path& file, const std::string& what)
{
    return Error::make(errc::kBadCheckpoint, file.string() + ": " + what);
}

// Reads and checks the framing; the archive is left for the caller.
Result<StateFile> readStateFile(const std::filesystem::path& file)
{
    auto bytes = core::readFile(file);
    if (!bytes)
        return bytes.error();
    auto corrupt = [&](const std::string& what) { return corruptState(file, what); };
    StateFile state;
    state.bytes = std::move(bytes).value();
    Reader reader(state.bytes);
    char magic[8];
    uint32_t version = 0, reserved = 0;
    uint64_t jsonSize = 0, blobSize = 0, checksum = 0;
    std::string_view json, blob;
    if (!reader.get(magic) || std::memcmp(magic, kMagic, sizeof kMagic) != 0)
        return corrupt("not a Crowdtrain training-state file (bad magic)");
    if (!reader.get(version) || version != kVersion)
        return corrupt(
            "unsupported format version " + std::to_string(version) + " (expected " + std::to_string(kVersion) + ")");
    if (!reader.get(reserved) || !reader.get(jsonSize) || !reader.take(jsonSize, json) || !reader.get(blobSize)
        || !reader.take(blobSize, blob))
        return corrupt("truncated (file is " + std::to_string(state.bytes.size()) + " bytes)");
    const std::size_t payloadEnd = reader.offset();
    if (!reader.get(checksum))
        return corrupt("truncated before its checksum");
    if (reader.offset() != state.bytes.size())
        return corrupt("unexpected bytes after the checksum");
    if (fnv1a(std::string_view(state.bytes).substr(0, payloadEnd)) != checksum)
        return corrupt("checksum mismatch (file is corrupted)");
    try {
        state.meta = nlohmann::json::parse(json);
    } catch (const std::exception& e) {
        return corrupt(std::string("bad header: ") + e.what());
    }
    state.blobOffset = std::size_t(blob.data() - state.bytes.data());
    state.blobSize = blob.size();
    return state;
}

GptConfig configFromJson(const nlohmann::json& j)
{
    GptConfig c;
    c.nLayer = j.at("n_layer").get<int64_t>();
    c.nHead = j.at("n_head").get<int64_t>();
    c.nEmbd = j.at("n_embd").get<int64_t>();
    c.blockSize = j.at("block_size").get<int64_t>();
    c.vocabSize = j.at("vocab_size").get<int64_t>();
    c.dropout = j.at("dropout").get<double>();
    return c;
}

} // namespace

Result<GptConfig> readTrainStateConfig(const std::filesystem::path& file)
{
    auto state = readStateFile(file);
    if (!state)
        return state.error();
    try {
        GptConfig config = configFromJson(state->meta.at("model"));
        if (Status valid = validate(config); !valid)
            return corruptState(file, valid.error().message);
        return config;
    } catch (const std::exception& e) {
        return corruptState(file, std::string("bad model config: ") + e.what());
    }
}

Status Trainer::loadState(const std::filesystem::path& file)
{
    auto state = readStateFile(file);
    if (!state)
        return state.error();
    auto corrupt = [&](const std::string& what) { return corruptState(file, what); };
    const std::string_view blob = state->blob();
    try {
        const auto& meta = state->meta;
        if (meta.at("model") != configJson(m_options.model))
            return corrupt(
                "saved for model " + meta.at("model").dump() + ", not " + configJson(m_options.model).dump());

        torch::serialize::InputArchive archive;
        archive.load_from(blob.data(), blob.size());
        torch::serialize::InputArchive modelArchive;
        torch::serialize::InputArchive optimizerArchive;
        archive.read("model", modelArchive);
        archive.read("optimizer", optimizerArchive);
        torch::Tensor rng;
        archive.read("rng", rng, /*is_buffer=*/true);

        m_model->load(modelArchive);
        m_model->to(m_device);
        m_optimizer->load(optimizerArchive);
        at::Generator generator = at::detail::getDefaultCPUGenerator();
        generator.set_state(rng);
        m_step = meta.at("step").get<int64_t>();
        m_tokensSeen = meta.at("tokens_seen").get<int64_t>();
        const auto& positions = meta.at("positions");
        m_data.train->setPosition(positions.at("train").get<uint64_t>());
        if (m_data.trainEval)
            m_data.trainEval->setPosition(positions.at("train_eval").get<uint64_t>());
        if (m_data.val)
            m_data.val->setPosition(positions.at("val").get<uint64_t>());
        return Status::success();
    } catch (const std::exception& e) {
        return corrupt(std::string("cannot restore: ") + e.what());
    }
}

} // namespace crowdtrain::engine
