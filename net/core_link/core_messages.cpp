#include "net/core_link/core_messages.h"

#include "net/wire/error_codes.h"

namespace crowdtrain::corelink {
namespace {

constexpr std::size_t kMaxPath = 4096;
constexpr std::size_t kMaxDevices = 64;
constexpr net::StrRule kPathRule{kMaxPath};
constexpr net::StrRule kNameRule{64};
constexpr net::StrRule kTextRule{64 * 1024, 0};

// Reads a frame's fields; the first bad one fails the decode.
template <typename Body>
auto decodeWith(const Frame& frame, std::string_view type, Body body)
    -> Result<decltype(body(std::declval<net::MapView&>()))>
{
    if (Status typed = expectType(frame, type); !typed)
        return typed.error();
    net::DecodeContext context;
    net::MapView view(context, &frame.object(), "");
    auto value = body(view);
    if (context.failed())
        return Error::make(net::errc::kMalformed, "a '" + std::string(type) + "' frame: " + context.error().message);
    return value;
}

net::ArrayWriter stringArray(const std::vector<std::string>& items)
{
    net::ArrayWriter array;
    for (const std::string& item : items)
        array.str(item);
    return array;
}

} // namespace

engine::GptConfig gptConfigOf(const net::ModelConfig& m)
{
    engine::GptConfig c;
    c.nLayer = int64_t(m.nLayer);
    c.nHead = int64_t(m.nHead);
    c.nEmbd = int64_t(m.nEmbd);
    c.blockSize = int64_t(m.blockSize);
    c.vocabSize = int64_t(m.vocabSize);
    c.dropout = 0.0;
    return c;
}

net::ModelConfig modelConfigOf(const engine::GptConfig& c)
{
    return net::ModelConfig{
        uint64_t(c.nLayer), uint64_t(c.nHead), uint64_t(c.nEmbd), uint64_t(c.blockSize), uint64_t(c.vocabSize)};
}

Status expectType(const Frame& frame, std::string_view type)
{
    if (frame.type == type)
        return Status::success();
    return Error::make(net::errc::kMalformed, "expected a '" + std::string(type) + "' frame, got '" + frame.type + "'");
}

net::MapWriter CoreHello::encode() const
{
    net::MapWriter w = message(type::kHello);
    w.u64("protocol", protocol).str("family", family).str("runtime", runtime);
    w.array("devices", stringArray(devices)).str("note", note);
    return w;
}

Result<CoreHello> CoreHello::decode(const Frame& frame)
{
    return decodeWith(frame, type::kHello, [](net::MapView& v) {
        CoreHello h;
        h.protocol = v.u64("protocol");
        h.family = v.str("family", kNameRule);
        h.runtime = v.str("runtime", {256, 0});
        h.devices = v.strs("devices", kMaxDevices, kNameRule);
        h.note = v.str("note", {1024, 0});
        return h;
    });
}

net::MapWriter TrainRequest::encode() const
{
    net::MapWriter w = message(type::kTrain);
    net::MapWriter modelMap, innerMap;
    model.write(modelMap);
    inner.write(innerMap);
    w.u64("task_id", taskId).map("model", modelMap).map("inner", innerMap);
    w.str("device", devices.device).array("team", stringArray(devices.team));
    w.u64("zero_stage", uint64_t(devices.zeroStage))
        .boolean("activation_checkpointing", devices.activationCheckpointing)
        .boolean("int8_moments", devices.int8Moments)
        .boolean("bf16_host_master", devices.bf16HostMaster);
    w.u64("micro_batch", uint64_t(devices.microBatch)).u64("threads", threads);
    w.str("theta_file", thetaFile).u64("elements", elements).str("windows_file", windowsFile);
    w.u64("steps", steps).u64("first_global_step", firstGlobalStep).str("local_file", localFile);
    w.u64("memory_budget_bytes", memoryBudgetBytes).u64("memory_total_bytes", memoryTotalBytes);
    return w;
}

Result<TrainRequest> TrainRequest::decode(const Frame& frame)
{
    return decodeWith(frame, type::kTrain, [](net::MapView& v) {
        TrainRequest r;
        r.taskId = v.u64("task_id");
        r.model = net::ModelConfig::read(v.map("model"));
        r.inner = net::InnerSettings::read(v.map("inner"));
        r.devices.device = v.str("device", kNameRule);
        r.devices.team = v.strs("team", kMaxDevices, kNameRule);
        r.devices.zeroStage = int(v.u64("zero_stage", 0, 3));
        r.devices.activationCheckpointing = v.boolean("activation_checkpointing");
        r.devices.int8Moments = v.has("int8_moments") && v.boolean("int8_moments"); // absent from older daemons
        r.devices.bf16HostMaster = v.has("bf16_host_master") && v.boolean("bf16_host_master");
        r.devices.microBatch = int64_t(v.u64("micro_batch", 0, 1u << 20));
        r.threads = v.u64("threads", 0, 4096);
        r.thetaFile = v.str("theta_file", kPathRule);
        r.elements = v.u64("elements", 1, uint64_t(1) << 40);
        r.windowsFile = v.str("windows_file", kPathRule);
        r.steps = v.u64("steps", 1, 1u << 30);
        r.firstGlobalStep = v.u64("first_global_step", 0, uint64_t(1) << 50);
        r.localFile = v.str("local_file", kPathRule);
        r.memoryBudgetBytes = v.u64("memory_budget_bytes");
        r.memoryTotalBytes = v.u64("memory_total_bytes");
        return r;
    });
}

net::MapWriter TrainStarted::encode() const
{
    net::MapWriter w = message(type::kStarted);
    w.str("device_name", deviceName).str("parallel_mode", parallelMode);
    w.u64("micro_batch", microBatch).u64("inner_steps_taken", innerStepsTaken);
    return w;
}

Result<TrainStarted> TrainStarted::decode(const Frame& frame)
{
    return decodeWith(frame, type::kStarted, [](net::MapView& v) {
        TrainStarted s;
        s.deviceName = v.str("device_name", {1024});
        s.parallelMode = v.str("parallel_mode", {32, 0});
        if (!s.parallelMode.empty() && s.parallelMode != "data_parallel" && s.parallelMode != "sharded")
            v.fail("parallel_mode", "not one of \"\", data_parallel, sharded");
        s.microBatch = v.u64("micro_batch", 0, 1u << 20);
        s.innerStepsTaken = v.u64("inner_steps_taken", 0, uint64_t(1) << 50);
        return s;
    });
}

net::MapWriter StepDone::encode() const
{
    net::MapWriter w = message(type::kStep);
    w.u64("step", step).f64("loss", loss).f64("step_ms", stepMs).f64("tokens_per_second", tokensPerSecond);
    if (deviceMs > 0)
        w.f64("device_ms", deviceMs);
    return w;
}

Result<StepDone> StepDone::decode(const Frame& frame)
{
    return decodeWith(frame, type::kStep, [](net::MapView& v) {
        StepDone s;
        s.step = v.u64("step", 1, 1u << 30);
        // A loss may be any finite number; a non-finite one ends the task
        // as "non_finite" through the weights check, not here.
        s.loss = v.f64("loss");
        s.stepMs = v.f64("step_ms", 0, 1e9);
        s.deviceMs = v.optF64("device_ms", 0, 1e9).value_or(0.0);
        s.tokensPerSecond = v.f64("tokens_per_second", 0, 1e12);
        return s;
    });
}

net::MapWriter TrainDone::encode() const
{
    net::MapWriter w = message(type::kDone);
    w.u64("steps", steps).u64("tokens", tokens).f64("mean_loss", meanLoss).f64("last_loss", lastLoss);
    w.f64("compute_ms", computeMs);
    return w;
}

Result<TrainDone> TrainDone::decode(const Frame& frame)
{
    return decodeWith(frame, type::kDone, [](net::MapView& v) {
        TrainDone d;
        d.steps = v.u64("steps", 0, 1u << 30);
        d.tokens = v.u64("tokens", 0, uint64_t(1) << 50);
        d.meanLoss = v.f64("mean_loss");
        d.lastLoss = v.f64("last_loss");
        d.computeMs = v.f64("compute_ms", 0, 1e12);
        return d;
    });
}

net::MapWriter InitRequest::encode() const
{
    net::MapWriter w = message(type::kInit);
    net::MapWriter modelMap;
    model.write(modelMap);
    w.map("model", modelMap).u64("seed", seed).str("out_file", outFile);
    return w;
}

Result<InitRequest> InitRequest::decode(const Frame& frame)
{
    return decodeWith(frame, type::kInit, [](net::MapView& v) {
        InitRequest r;
        r.model = net::ModelConfig::read(v.map("model"));
        r.seed = v.u64("seed");
        r.outFile = v.str("out_file", kPathRule);
        return r;
    });
}

net::MapWriter GenerateRequest::encode() const
{
    net::MapWriter w = message(type::kGenerate);
    w.str("folder", folder).str("prompt", prompt).u64("max_tokens", maxTokens);
    w.f64("temperature", temperature).u64("top_k", topK).u64("seed", seed);
    return w;
}

Result<GenerateRequest> GenerateRequest::decode(const Frame& frame)
{
    return decodeWith(frame, type::kGenerate, [](net::MapView& v) {
        GenerateRequest r;
        r.folder = v.str("folder", kPathRule);
        r.prompt = v.str("prompt", kTextRule);
        r.maxTokens = v.u64("max_tokens", 1, 4096);
        r.temperature = v.f64("temperature", 0, 100);
        r.topK = v.u64("top_k", 0, 1u << 20);
        r.seed = v.u64("seed");
        return r;
    });
}

net::MapWriter textMessage(std::string_view text)
{
    net::MapWriter w = message(type::kText);
    w.str("text", text);
    return w;
}

Result<std::string> decodeText(const Frame& frame)
{
    return decodeWith(frame, type::kText, [](net::MapView& v) { return v.str("text", kTextRule); });
}

net::MapWriter errorMessage(const Error& error)
{
    net::MapWriter w = message(type::kError);
    w.str("code", error.code.empty() ? std::string("internal") : error.code);
    w.str("message", error.message.substr(0, 4000));
    return w;
}

Error decodeError(const Frame& frame)
{
    // A pair, not an Error: an Error result of an Error cannot be told apart.
    auto decoded = decodeWith(frame, type::kError, [](net::MapView& v) {
        std::string code = v.str("code", kNameRule);
        return std::pair(std::move(code), v.str("message", {4096, 0}));
    });
    if (!decoded)
        return decoded.error();
    return Error::make(decoded->first, std::move(decoded->second));
}

} // namespace crowdtrain::corelink
