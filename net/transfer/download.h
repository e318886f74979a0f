#pragma once

// The client side of chunked downloads, resumable and verified. Bytes go to
// "<target>.part"; after each chunk is verified (its SHA-256 against the
// description) and made durable, the sidecar "<target>.part.progress" records
// how many chunks are done, so a download killed at any moment restarts
// after the last verified chunk (re-checked locally, never fetched again).
// At the end the whole SHA-256 is checked before the file is renamed onto
// the target; on a mismatch nothing is renamed and the partial files are
// removed. The source is an interface so that tests can inject faults;
// SocketSource fetches over a Client. One Download per target at a time.

#include "core/result.h"
#include "net/wire/messages_resource.h"

#include <atomic>
#include <filesystem>
#include <functional>

namespace crowdtrain::net {

class ResourceSource {
public:
    virtual ~ResourceSource() = default;
    virtual Result<ResourceDescription> describe(const std::string& resource) = 0;
    // The bytes of chunk `index` (unverified).
    virtual Result<std::string> fetch(const std::string& resource, uint64_t index) = 0;
};

struct DownloadOptions {
    int attemptsPerChunk = 3; // fetches of one chunk before giving up
    std::function<void(uint64_t doneBytes, uint64_t totalBytes)> progress; // after each chunk
    const std::atomic<bool>* cancel = nullptr; // checked between chunks
};

struct DownloadReport {
    ResourceDescription description;
    uint64_t resumedChunks = 0; // verified chunks found in the .part file
    uint64_t fetchedChunks = 0; // chunks fetched and written this time
    uint64_t rejectedChunks = 0; // fetched chunks that failed their check and were fetched again
    bool alreadyComplete = false; // the target already had the resource's SHA-256
};

class Download {
public:
    Download(ResourceSource& source, std::string resource, std::filesystem::path target, DownloadOptions options = {});

    // Errors: the source's ("not_found", "timeout", ...), "checksum_mismatch"
    // (a chunk, named, failed every attempt; or the whole file), "malformed"
    // (an inconsistent description), "cancelled", "io_error".
    Result<DownloadReport> run();

    static std::filesystem::path partPath(const std::filesystem::path& target);
    static std::filesystem::path progressPath(const std::filesystem::path& target);

private:
    Result<uint64_t> resumePoint(int fd);
    Status fetchChunk(int fd, uint64_t index);
    Status finish(int fd);
    void discardPartial();
    std::string progressHeader() const;

    ResourceSource& m_source;
    std::string m_resource;
    std::filesystem::path m_target;
    DownloadOptions m_options;
    DownloadReport m_report;
};

} // namespace crowdtrain::net
