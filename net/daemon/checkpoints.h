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
// Before starting, the free disk must hold the checkpoint and 64 MiB more;
// a disk without that room, or one that fills up during the download
// ("No space left on device"), leaves the job "waiting" with that error
// (logged once) and tries again every retryMinMs, not backing off, so it
// completes soon after space returns. The part files kept so far, and every
// checkpoint already downloaded, stay as they are.
//
// What the model wrote: a checkpoint published with samples.json (the
// coordinator's continuations of the project's prompts) has it fetched on
// its own, a few hundred bytes, into <root>/<project>/samples/round-<R>.json
// when list() first sees it; list() then carries it and a "samples" event
// announces it, so the app can show how the writing changed round by round
// without downloading any model.
//
// Names: every public function takes only a project name by the wire's
// rule (net::isProjectName; "bad_request" otherwise), and every path it
// creates, writes or deletes must still lie under the root once symbolic
// links are resolved ("io_error" otherwise). A folder or file found on disk
// with a name this class did not write (round-best, round-, a round number
// past uint64, a job.json of the wrong shape) is skipped, with a notice.
// A download records the hub as the daemon names it ("demo" for the
// built-in demo hub, whose port changes at each start) and resolves it at
// each attempt, so an interrupted demo download resumes against the demo
// hub as it is now.
//
// Generation loads the model and tokenizer from a downloaded folder and
// streams whole UTF-8 characters as "generated" events.
//
// Threads: one worker thread runs downloads and generation in turn; the
// public functions may be called from any thread. The destructor stops the
// worker at a chunk or token boundary and joins it.
//
// The folder layout is CheckpointFolders' (checkpoint_folders.h); fetching a
// file and generating text are checkpoint_transfer.h's; this class keeps the
// queue of downloads, sample fetches and generations.

#include "net/control/control_names.h"
#include "net/control/value.h"
#include "net/daemon/checkpoint_folders.h"
#include "net/daemon/checkpoint_swarm.h"
#include "net/daemon/checkpoint_transfer.h"
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
    // Something on disk was skipped or set aside (shown in status "notices").
    std::function<void(const std::string&)> notice;
    // The hub a download names ("demo" or a link), as it is now; an error
    // (the demo hub not running) is retried like a dropped connection.
    std::function<Result<HubLink>(const std::string& hub)> resolve;
    // Called with true before generation starts and false after (the
    // daemon pauses training when its setting says so).
    std::function<void(bool generating)> generating;
    // The volunteer's download limit and the month's count (may be null).
    std::shared_ptr<limits::NetworkThrottle> throttle;
    // The checkpoint swarm (may be null: every file in chunks from the hub).
    CheckpointSwarm* swarm = nullptr;
    int64_t retryMinMs = 120'000;
    int64_t retryMaxMs = 6 * 3600 * 1000;
};

class Checkpoints {
public:
    Checkpoints(HubDirectory& hubs, CheckpointsOptions options);
    ~Checkpoints();

    // The hub's list for `project` merged with what is here: each
    // {round, tokens, val_loss, created_ms, bytes, state (control::DownloadState),
    // done_bytes, bytes_per_second, error, folder, samples: [{prompt, text}]
    // once fetched, torrent: whether the hub seeds it; while downloading
    // from the swarm: peers, from_peers_bytes, from_hub_bytes; once here
    // and shared: seeding, seed_peers, uploaded_bytes}. Queues the fetch of
    // samples not fetched yet.
    Result<control::Value> list(const HubLink& hub, const std::string& project);
    // `hub` as the daemon names it: "demo" or a hub link (resolved at each attempt).
    Status download(const std::string& hub, const std::string& project, uint64_t round);
    // Downloads of `hub` waiting for a retry try again now (the hub is back).
    void retryNow(const std::string& hub);
    Status pauseDownload(const std::string& project, uint64_t round, bool paused);
    Status cancel(const std::string& project, uint64_t round); // removes the partial folder
    Status remove(const std::string& project, uint64_t round); // a downloaded checkpoint
    // Queues a generation; returns its id. Error "not_downloaded".
    Result<uint64_t> generate(GenerateRequest request);
    // The folders: where a checkpoint is, which are here (no network).
    const CheckpointFolders& folders() const { return m_folders; }

private:
    struct Job {
        std::string link; // "demo" or a hub link, as stored in job.json
        std::string project;
        uint64_t round = 0;
        control::DownloadState state = control::DownloadState::Queued;
        std::string error;
        uint64_t doneBytes = 0;
        uint64_t totalBytes = 0;
        double bytesPerSecond = 0;
        uint64_t fromPeers = 0; // swarm payload from other volunteers
        uint64_t fromHub = 0; // swarm payload from the hub's seed
        int peers = 0;
        int64_t retryAtMs = 0;
        int64_t backoffMs = 0;
        bool paused = false;
    };
    static std::string key(const std::string& project, uint64_t round);
    void work();
    void runDownload(Job job);
    struct SampleFetch {
        HubLink hub;
        std::string project;
        uint64_t round = 0;
        net::FileInfo file;
    };
    void runSampleFetch(const SampleFetch& fetch);
    void publishJob(const Job& job);

    HubDirectory& m_hubs;
    CheckpointsOptions m_options;
    CheckpointFolders m_folders;
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
