#pragma once

// A ResourceSource that asks a coordinator over a Client (describe and fetch
// messages of one project). Used by one thread, like its Client.

#include "net/transfer/download.h"
#include "net/transport/client.h"

namespace crowdtrain::net {

class SocketSource : public ResourceSource {
public:
    SocketSource(Client& client, std::string project, int timeoutMs = kRequestTimeoutMs);

    Result<ResourceDescription> describe(const std::string& resource) override;
    Result<std::string> fetch(const std::string& resource, uint64_t index) override;

private:
    Client& m_client;
    std::string m_project;
    int m_timeoutMs;
};

// Downloads `resource` of `project` into `target` over `client`.
Result<DownloadReport> downloadResource(Client& client, const std::string& project, const std::string& resource,
    const std::filesystem::path& target, DownloadOptions options = {});

} // namespace crowdtrain::net
