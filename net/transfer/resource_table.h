#pragma once

// The server side of chunked downloads: named, immutable resources (files on
// disk or blobs in memory) with their size, chunk size, whole SHA-256 and
// per-chunk SHA-256, computed once when added. Serves describe and fetch
// requests (handleTransferRequest). A resource name always denotes the same
// bytes: publish new content under a new name. Thread-safe.

#include "core/result.h"
#include "net/wire/envelope.h"
#include "net/wire/messages_resource.h"

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

namespace crowdtrain::net {

struct Chunk {
    uint64_t index = 0;
    std::string data;
};

class ResourceTable {
public:
    // Hashes the file now. The file must not change afterwards: every chunk
    // is checked against its hash again when served. Errors: "io_error",
    // "too_large", "invalid_argument" (name or chunk size), "exists".
    Status addFile(
        const std::string& name, const std::filesystem::path& file, uint64_t chunkBytes = kDefaultChunkBytes);
    Status addBlob(const std::string& name, std::string bytes, uint64_t chunkBytes = kDefaultChunkBytes);
    void remove(const std::string& name);
    bool contains(const std::string& name) const;

    // Errors: "not_found".
    Result<ResourceDescription> describe(const std::string& name) const;
    // Errors: "not_found", "bad_index", "io_error" (the file changed or vanished).
    Result<Chunk> chunk(const std::string& name, uint64_t index) const;

private:
    struct Entry {
        ResourceDescription description;
        std::optional<std::filesystem::path> file;
        std::string blob;
    };
    Status add(const std::string& name, std::shared_ptr<Entry> entry);
    std::shared_ptr<const Entry> find(const std::string& name) const;

    mutable std::mutex m_mutex;
    std::map<std::string, std::shared_ptr<const Entry>, std::less<>> m_entries;
};

// The reply to a describe or fetch request (an error reply for an unknown
// resource or index); nullopt for other types. The caller checks the project.
std::optional<std::string> handleTransferRequest(const ResourceTable& table, const Envelope& request);

} // namespace crowdtrain::net
