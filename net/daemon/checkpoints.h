#pragma once

// Checkpoints on this machine: the joined projects' published checkpoints
// downloaded into <root>/<project>/round-<R>/ (an ordinary Hugging Face GPT-2
// folder plus tokenizer/, which other programs can open), and text
// generated from them. A download goes file by file through the verified,
// resumable transfer (net/transfer/download.h) into a hidden
// .round-<R>.part/ folder that also records the job (job.json), so it
// resumes across daemon restarts; only when every file matched its SHA-256
// is the folder renamed into place, so a listed checkpoint is always whole.
// A temporary failure (no answer, a dropped connection) is retried with
// backoff from 2 minutes up to 6 hours, never given up; a permanent one
// (the hub refuses, a file that never matches) ends the job with its reason.
// Before starting, the free disk must hold the checkpoint.
//
// What the model wrote: a checkpoint published with samples.json (the
// coordinator's continuations of the project's prompts) has it fetched on
// its own, a few hundred bytes, into <root>/<project>/samples/round-<R>.json
// when list() first sees it; list() then carries it and a "samples" event
// announces it, so the app can show how the writing changed round by round
// without downloading any model.
//
// Generation loads the model and tokenizer from a downloaded folder and
// streams whole UTF-8 characters as "generated" events.
//
// Threads: one worker thread runs downloads and generation in turn; the
// public functions may be called from any thread. The destructor stops the
// worker at a chunk or token boundary and joins it.

#include "net/control/value.h"
#include "net/daemon/hub_directory.h"
#include "net/limits/throttle.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>

namespace crowdtrain::daemon {

struct CheckpointsOptions {
    std::filesystem::path root; // <dataDir>/checkpoints
    std::function<void(std::string_view type, const control::Value& body)> publish;
    std::function<void(const std::string&)> log;
    // Called with true before generation starts and false after (the
    // daemon pauses training when its setting says so).
    std::function<void(bool generating)> generating;
    // The volunteer's download limit and the month's count (may be null).
    std::shared_ptr<limits::NetworkThrottle> throttle;
    int64_t retryMinMs = 120'000;
    int64_t retryMaxMs = 6 * 3600 * 1000;
};

struct GenerateRequest {
    std::string project;
    uint64_t round = 0;
    std::string prompt;
    double temperature = 0.8;
    int64_t topK = 200;
    int64_t maxTokens = 200;
    uint64_t seed = 1337;
};

class Checkpoints {
public:
    Checkpoints(HubDirectory& hubs, CheckpointsOptions options);
    ~Checkpoints();

    // The hub's list for `project` merged with what is here: each
    // {round, tokens, val_loss, created_ms, bytes, state: "remote" |
    // "queued" | "downloading" | "paused" | "waiting" | "ready" | "failed",
    // done_bytes, bytes_per_second, error, folder, samples: [{prompt, text}]
    // once fetched}. Queues the fetch of samples not fetched yet.
    Result<control::Value> list(const HubLink& hub, const std::string& project);
    // Checkpoints downloaded here, for every project (no network).
    control::Value local() const;
    Status download(const HubLink& hub, const std::string& project, uint64_t round);
    Status pauseDownload(const std::string& project, uint64_t round, bool paused);
    Status cancel(const std::string& project, uint64_t round); // removes the partial folder
    Status remove(const std::string& project, uint64_t round); // a downloaded checkpoint
    // Queues a generation; returns its id. Error "not_downloaded".
    Result<uint64_t> generate(GenerateRequest request);
    // Newest downloaded round of `project`, if any.
    std::optional<uint64_t> newestLocal(const std::string& project) const;
    std::filesystem::path folderOf(const std::string& project, uint64_t round) const;

private:
    struct Job {
        std::string link;
        HubLink hub;
        std::string project;
        uint64_t round = 0;
        std::string state = "queued";
        std::string error;
        uint64_t doneBytes = 0;
        uint64_t totalBytes = 0;
        double bytesPerSecond = 0;
        int64_t retryAtMs = 0;
        int64_t backoffMs = 0;
        bool paused = false;
    };
    static std::string key(const std::string& project, uint64_t round);
    std::filesystem::path partOf(const std::string& project, uint64_t round) const;
    void work();
    void resumeJobs();
    void runDownload(Job job);
    void runGenerate(const GenerateRequest& request, uint64_t id);
    struct SampleFetch {
        HubLink hub;
        std::string project;
        uint64_t round = 0;
        net::FileInfo file;
    };
    void runSampleFetch(const SampleFetch& fetch);
    std::filesystem::path samplesFileOf(const std::string& project, uint64_t round) const;
    // The prompts and continuations of a fetched samples.json (nil when absent or unreadable).
    control::Value readSamples(const std::string& project, uint64_t round) const;
    void publishJob(const Job& job);

    HubDirectory& m_hubs;
    CheckpointsOptions m_options;
    mutable std::mutex m_mutex;
    std::condition_variable m_wake;
    bool m_stopping = false;
    std::atomic<bool> m_cancel{false}; // the running download stops at a chunk boundary
    std::map<std::string, Job> m_jobs;
    std::deque<std::pair<uint64_t, GenerateRequest>> m_generations;
    std::deque<SampleFetch> m_sampleFetches;
    std::set<std::string> m_samplesQueued; // key()s fetched or being fetched this run
    uint64_t m_nextGeneration = 1;
    std::thread m_worker;
};

} // namespace crowdtrain::daemon
