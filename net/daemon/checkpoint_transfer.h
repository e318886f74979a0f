#pragma once

// The checkpoint worker's two kinds of work, apart from its queue
// (checkpoints.h): fetching a hub's file through the verified, resumable
// transfer (net/transfer/download.h), its chunks kept to the volunteer's
// download limit and counted toward the month; and generating text from a
// downloaded checkpoint, streamed as whole UTF-8 characters.
// Free functions, called on the worker thread.

#include "net/control/value.h"
#include "net/daemon/hub_directory.h"
#include "net/limits/throttle.h"
#include "net/swarm/swarm_fetch.h"
#include "net/transport/client.h"

#include <atomic>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>

namespace crowdtrain::daemon {

struct FetchOptions {
    std::string project; // the project the resource belongs to
    int timeoutMs = 30000; // per chunk
    limits::NetworkThrottle* throttle = nullptr; // may be null
    const std::atomic<bool>* cancel = nullptr; // checked between chunks
    std::function<void(uint64_t doneBytes)> progress; // may be empty
};

// Fetches `resource` into `target`; the file's SHA-256 (hex) on success.
// Errors: the transfer's ("timeout", "checksum_mismatch", "cancelled", ...).
Result<std::string> fetchResource(
    net::Client& client, const std::string& resource, const std::filesystem::path& target, const FetchOptions& options);

// One checkpoint's files (and its project's tokenizer, so the folder can
// generate text on its own) fetched into `part`.
class CheckpointSwarm;
using swarm::SwarmSources;

struct CheckpointFetch {
    std::string project;
    uint64_t round = 0;
    std::filesystem::path part; // the .round-R.part folder
    limits::NetworkThrottle* throttle = nullptr;
    const std::atomic<bool>* cancel = nullptr;
    std::function<void(uint64_t doneBytes, uint64_t totalBytes, double bytesPerSecond)> progress;
    // Files the hub offers as torrents go through the swarm first, when
    // there is one (checkpoint_swarm.h).
    CheckpointSwarm* swarm = nullptr;
    std::function<void(const SwarmSources&)> sources; // where the bytes came from, as they come
    std::function<void(const std::string&)> log;
};

struct FetchOutcome {
    // Retry: a temporary failure. NoSpace: the data folder's disk is full
    // (or would be): tried again, at the shortest backoff, until it is not.
    enum Verdict { Done, Retry, NoSpace, Failed };
    Verdict verdict = Done;
    std::string error;
    std::optional<uint64_t> totalBytes; // once the hub's list said
};

FetchOutcome fetchCheckpoint(const HubDirectory& hubs, const HubLink& hub, const CheckpointFetch& fetch);

struct GenerateRequest {
    std::string project;
    uint64_t round = 0;
    std::string prompt;
    double temperature = 0.8;
    int64_t topK = 200;
    int64_t maxTokens = 200;
    uint64_t seed = 1337;
};

struct GenerateHooks {
    // {id, project, round, text, done, error}: a `generated` event's body.
    std::function<void(const control::Value& body)> emit;
    // True before the first token and false after the last.
    std::function<void(bool generating)> generating;
    // False stops the generation at the next token.
    std::function<bool()> keepGoing;
    std::filesystem::path coreBinary; // crowdtrain-core; empty: the default
};

// Generates from the checkpoint in `folder` (its model and tokenizer/),
// emitting a piece about every 50 ms and a last one with done: true (and
// the error, if any).
void generateText(
    const std::filesystem::path& folder, const GenerateRequest& request, uint64_t id, const GenerateHooks& hooks);

} // namespace crowdtrain::daemon
