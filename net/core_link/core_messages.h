#pragma once

// The messages of the training core's local protocol (docs/protocol.md, §13):
// what the daemon asks of crowdtrain-core and what the core answers, each a
// struct with its encoding (a map made by message()) and a bounded decoding
// of an untrusted frame. Plain C++ and msgpack: both ends link it, the
// daemon without libtorch. Thread-safe (values and pure functions).

#include "engine/gpt_config.h"
#include "net/core_link/core_channel.h"
#include "net/wire/messages_common.h"

#include <cstdint>
#include <string>
#include <vector>

namespace crowdtrain::corelink {

// 2: train's int8_moments and bf16_host_master (a core of protocol 1 would
// ignore them and train in more memory than the planner allowed).
inline constexpr uint64_t kCoreProtocol = 2;

namespace type {
inline constexpr std::string_view kHello = "hello"; // both ways: daemon first
inline constexpr std::string_view kTrain = "train"; // daemon -> core
inline constexpr std::string_view kStarted = "started"; // core: the task's trainer is ready
inline constexpr std::string_view kStep = "step"; // core: one inner step done; waits for a command
inline constexpr std::string_view kGo = "go"; // daemon: take the next step
inline constexpr std::string_view kWrapUp = "wrap_up"; // daemon: finish with the steps done
inline constexpr std::string_view kAbort = "abort"; // daemon: drop the task
inline constexpr std::string_view kDone = "done"; // core: the local weights are in the file
inline constexpr std::string_view kInit = "init"; // daemon: theta_0 from a seed into a file
inline constexpr std::string_view kInitialized = "initialized";
inline constexpr std::string_view kGenerate = "generate"; // daemon: sample text from a checkpoint
inline constexpr std::string_view kText = "text"; // core: a piece of generated text
inline constexpr std::string_view kGenerated = "generated"; // core: generation ended
inline constexpr std::string_view kError = "error"; // core: the request failed
inline constexpr std::string_view kExit = "exit"; // daemon: exit now (frees every byte of device memory)
} // namespace type

// What a task's inner steps produced.
struct TaskOutcome {
    std::vector<float> local; // theta after the inner steps, flat (the in-process trainer's)
    // Where the daemon's CoreTrainer leaves them instead: the core's file of
    // P float32, checked finite, read a chunk at a time (local stays empty).
    std::string localFile;
    uint64_t steps = 0;
    uint64_t tokens = 0; // steps * batch * block
    double meanLoss = 0;
    double lastLoss = 0;
    double computeMs = 0; // sum of the steps' times
};

// Where a task trains.
struct TrainingDevices {
    std::string device = "cpu"; // the one device, when `team` lists fewer than two
    std::vector<std::string> team{}; // two or more: one rank each ("cuda:0", "cuda:1")
    int zeroStage = 0; // the team's: 0 data parallel, 3 sharded
    bool activationCheckpointing = false; // per block (a team's ranks, or the one device)
    bool int8Moments = false; // AdamW's moments in 8 bits (the one device)
    // bf16 weights and gradients on the one device, the fp32 master and the
    // 8-bit moments in host RAM (engine/host_master.h).
    bool bf16HostMaster = false;
    // The memory planner's choice and why (limits::DevicePlan::reason): the
    // daemon's, for `status`; not sent.
    std::string reason{};
    int64_t microBatch = 0; // sequences per pass on each device (0 = its whole share)
};

// The core's answer to hello: what it is and what it can train on.
struct CoreHello {
    uint64_t protocol = kCoreProtocol;
    std::string family; // "cpu", "cuda" (later "rocm", "mps"): how it was built
    std::string runtime; // e.g. "libtorch 1.13.1", "libtorch 2.11.0 + CUDA 13.0"
    std::vector<std::string> devices; // usable now, "cpu" first: "cpu", "cuda:0", ...
    std::string note; // why a device family finds no device ("" when it does)

    net::MapWriter encode() const;
    static Result<CoreHello> decode(const Frame& frame);
};

struct TrainRequest {
    uint64_t taskId = 0;
    net::ModelConfig model;
    net::InnerSettings inner;
    TrainingDevices devices;
    uint64_t threads = 0; // intra-op threads (0: the core's default)
    std::string thetaFile; // P float32 little-endian: the weights to start from
    uint64_t elements = 0; // P
    std::string windowsFile; // windows_file.h: the task's token windows in order
    uint64_t steps = 0;
    uint64_t firstGlobalStep = 0;
    std::string localFile; // where the core writes the local weights (P float32)
    uint64_t memoryBudgetBytes = 0; // the device memory training may use (0: no cap)
    uint64_t memoryTotalBytes = 0;

    net::MapWriter encode() const;
    static Result<TrainRequest> decode(const Frame& frame);
};

struct TrainStarted {
    std::string deviceName; // "cpu", "cuda:0", "cuda:0,cuda:1"
    std::string parallelMode; // "", "data_parallel", "sharded"
    uint64_t microBatch = 0;
    uint64_t innerStepsTaken = 0; // by this core before the task (its AdamW's age)

    net::MapWriter encode() const;
    static Result<TrainStarted> decode(const Frame& frame);
};

struct StepDone {
    uint64_t step = 0; // 1-based within the task
    double loss = 0;
    double stepMs = 0; // the step's time on the device (synchronised)
    // The device's own time for it (timing events on a GPU); 0 where the
    // core has none (the CPU): sent only when above 0.
    double deviceMs = 0;
    double tokensPerSecond = 0;

    // What the busy-share governor counts as busy: the device's own time
    // where the core measures it, else the step's.
    double busyMs() const { return deviceMs > 0 ? deviceMs : stepMs; }

    net::MapWriter encode() const;
    static Result<StepDone> decode(const Frame& frame);
};

struct TrainDone {
    uint64_t steps = 0;
    uint64_t tokens = 0;
    double meanLoss = 0;
    double lastLoss = 0;
    double computeMs = 0;

    net::MapWriter encode() const;
    static Result<TrainDone> decode(const Frame& frame);
};

struct InitRequest {
    net::ModelConfig model;
    uint64_t seed = 0;
    std::string outFile; // P float32 little-endian

    net::MapWriter encode() const;
    static Result<InitRequest> decode(const Frame& frame);
};

struct GenerateRequest {
    std::string folder; // a downloaded checkpoint (model.safetensors, config.json, tokenizer/)
    std::string prompt;
    uint64_t maxTokens = 0;
    double temperature = 1.0;
    uint64_t topK = 0;
    uint64_t seed = 0;

    net::MapWriter encode() const;
    static Result<GenerateRequest> decode(const Frame& frame);
};

// "text" carries `text`; "error" carries `code` and `message`.
net::MapWriter textMessage(std::string_view text);
Result<std::string> decodeText(const Frame& frame);
net::MapWriter errorMessage(const Error& error);
Error decodeError(const Frame& frame);

// The model's shape as the wire writes it and as the engine builds it
// (dropout 0: pseudo-gradients must not depend on a dropout stream).
engine::GptConfig gptConfigOf(const net::ModelConfig& model);
net::ModelConfig modelConfigOf(const engine::GptConfig& config);

// Checks the frame's type; "malformed" naming both when it differs.
Status expectType(const Frame& frame, std::string_view type);

} // namespace crowdtrain::corelink
