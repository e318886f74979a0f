#pragma once

// The checkpoints folder's layout and its rules (checkpoints.h):
//   <root>/<project>/round-<R>/                 a downloaded checkpoint
//   <root>/<project>/.round-<R>.part/job.json   a download under way
//   <root>/<project>/samples/round-<R>.json     a checkpoint's samples
// Every path made here must still lie under the root once links are
// resolved (contained()), and a name found on disk that this layout does
// not write is skipped with one notice per path.
// Thread-safe (the notices are guarded; the rest reads the disk).

#include "core/result.h"
#include "net/control/value.h"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace crowdtrain::daemon {

// A download found under way on disk (its job.json).
struct SavedDownload {
    std::string link; // "demo" or a hub link
    std::string project;
    uint64_t round = 0;
    bool paused = false;
};

class CheckpointFolders {
public:
    CheckpointFolders(std::filesystem::path root, std::function<void(const std::string&)> notice);

    const std::filesystem::path& root() const { return m_root; }
    std::filesystem::path folderOf(const std::string& project, uint64_t round) const;
    std::filesystem::path partOf(const std::string& project, uint64_t round) const;
    std::filesystem::path samplesFileOf(const std::string& project, uint64_t round) const;
    // Whether `path` lies under the root with links resolved ("io_error" if not).
    Status contained(const std::filesystem::path& path) const;

    // The downloads under way, from their job.json files.
    std::vector<SavedDownload> savedDownloads() const;
    Status writeJob(const SavedDownload& job) const;
    // Newest downloaded round of `project`, if any.
    std::optional<uint64_t> newestLocal(const std::string& project) const;
    // [{project, round, folder}] of every downloaded checkpoint.
    control::Value local() const;
    // The prompts and continuations of a fetched samples.json (nil when absent or unreadable).
    control::Value readSamples(const std::string& project, uint64_t round) const;

private:
    // The round of a folder named <prefix><R><suffix> that this layout has;
    // anything else gets a notice (once per path) and nullopt.
    std::optional<uint64_t> roundOf(
        const std::filesystem::path& path, std::string_view prefix, std::string_view suffix) const;
    void noticeOnce(const std::filesystem::path& path, const std::string& text) const;

    std::filesystem::path m_root;
    std::function<void(const std::string&)> m_notice;
    mutable std::mutex m_noticedMutex;
    mutable std::set<std::string> m_noticed; // paths already reported as skipped
};

} // namespace crowdtrain::daemon
