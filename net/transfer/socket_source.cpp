#include "net/transfer/socket_source.h"

#include "net/wire/error_codes.h"

namespace crowdtrain::net {

SocketSource::SocketSource(Client& client, std::string project, int timeoutMs)
    : m_client(client)
    , m_project(std::move(project))
    , m_timeoutMs(timeoutMs)
{ }

Result<ResourceDescription> SocketSource::describe(const std::string& resource)
{
    auto reply = m_client.request<ResourceDescription>(DescribeRequest{m_project, resource}, m_timeoutMs);
    if (reply && reply->resource != resource)
        return Error::make(errc::kMalformed, "asked to describe " + resource + ", got " + reply->resource);
    return reply;
}

Result<std::string> SocketSource::fetch(const std::string& resource, uint64_t index)
{
    auto reply = m_client.request<FetchReply>(FetchRequest{m_project, resource, index}, m_timeoutMs);
    if (!reply)
        return reply.error();
    if (reply->resource != resource || reply->index != index)
        return Error::make(errc::kChecksumMismatch,
            "asked for chunk " + std::to_string(index) + " of " + resource + ", got chunk "
                + std::to_string(reply->index) + " of " + reply->resource);
    return std::move(reply->data);
}

Result<DownloadReport> downloadResource(Client& client, const std::string& project, const std::string& resource,
    const std::filesystem::path& target, DownloadOptions options)
{
    SocketSource source(client, project);
    return Download(source, resource, target, std::move(options)).run();
}

} // namespace crowdtrain::net
