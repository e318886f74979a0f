#include "net/swarm/swarm_fetch.h"

#include "core/file_io.h"
#include "net/transfer/sha256.h"
#include "net/wire/error_codes.h"

#include <chrono>
#include <map>
#include <netdb.h>
#include <sys/socket.h>
#include <thread>

namespace crowdtrain::swarm {

namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kAskEvery = std::chrono::seconds(10);
constexpr auto kAskAgainWithoutPeers = std::chrono::seconds(3);
constexpr auto kPollEvery = std::chrono::milliseconds(250);

std::string endpointKey(const PeerEndpoint& endpoint)
{
    return endpoint.host + "|" + std::to_string(endpoint.port);
}

} // namespace

std::optional<std::string> dialableAddress(const std::string& host)
{
    if (isIpAddress(host))
        return host;
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || !found)
        return std::nullopt;
    char text[NI_MAXHOST] = {};
    const bool ok
        = ::getnameinfo(found->ai_addr, found->ai_addrlen, text, sizeof text, nullptr, 0, NI_NUMERICHOST) == 0;
    ::freeaddrinfo(found);
    return ok ? std::optional<std::string>(text) : std::nullopt;
}

Result<TorrentFile> loadListedTorrent(const std::filesystem::path& torrentFile, const std::string& infoHash,
    const std::string& fileName, uint64_t fileBytes)
{
    auto bytes = core::readFile(torrentFile, 64 << 20);
    auto torrent = bytes ? readTorrent(*bytes) : Result<TorrentFile>(bytes.error());
    if (!torrent || torrent->infoHash != infoHash || torrent->fileName != fileName || torrent->fileBytes != fileBytes) {
        std::error_code ec;
        std::filesystem::remove(torrentFile, ec);
        return Error::make(net::errc::kMalformed,
            "the hub's torrent does not describe " + fileName
                + (torrent ? std::string() : ": " + torrent.error().message));
    }
    return torrent;
}

SwarmDownload fetch(SwarmSession& session, const TorrentFile& torrent, const std::filesystem::path& dir,
    const std::string& sha256, const FetchHooks& hooks)
{
    SwarmDownload result;
    const std::filesystem::path target = dir / torrent.fileName;
    const std::string& infoHash = torrent.infoHash;
    std::error_code ec;
    auto leave = [&](SwarmDownload::Verdict verdict, std::string why, bool removeFile) {
        session.remove(infoHash);
        if (hooks.eachPoll)
            (void)hooks.eachPoll(); // count what moved until now
        if (removeFile)
            std::filesystem::remove(target, ec);
        result.verdict = verdict;
        result.why = std::move(why);
        return result;
    };
    if (Status s = session.download(torrent, dir); !s) {
        result.why = s.error().message;
        return result;
    }

    std::optional<PeerEndpoint> hubSeed;
    std::map<std::string, std::pair<PeerEndpoint, uint64_t>> receivedFrom; // by endpoint
    auto lastProgress = Clock::now();
    uint64_t lastDone = 0;
    auto nextAsk = Clock::now();
    std::string askError;
    while (true) {
        const auto now = Clock::now();
        if (hooks.cancel && hooks.cancel->load())
            return leave(SwarmDownload::Cancelled, {}, false);
        if (now >= nextAsk && hooks.askPeers) {
            std::vector<PeerEndpoint> peers = hooks.askPeers(&askError);
            if (!peers.empty() && !hubSeed)
                hubSeed = peers.front(); // the hub lists itself first
            session.addPeers(infoHash, peers);
        }
        auto state = session.progress(infoHash);
        if (!state)
            return leave(SwarmDownload::Fallback, "the torrent left the session", false);
        if (hooks.eachPoll)
            if (std::optional<std::string> stop = hooks.eachPoll())
                return leave(SwarmDownload::Fallback, *stop, false);
        for (const PeerStats& peer : session.peerStats(infoHash)) {
            auto& seen = receivedFrom[endpointKey(peer.endpoint)];
            seen.first = peer.endpoint;
            seen.second = std::max(seen.second, peer.downloaded);
        }
        result.sources = {};
        for (const auto& [key, seen] : receivedFrom)
            (hubSeed && seen.first == *hubSeed ? result.sources.fromHub : result.sources.fromPeers) += seen.second;
        result.sources.peers = state->peers;
        if (now >= nextAsk)
            nextAsk = now + (state->peers == 0 ? kAskAgainWithoutPeers : kAskEvery);
        if (hooks.progress)
            hooks.progress(state->doneBytes, result.sources);
        if (state->complete)
            break;
        if (!state->error.empty())
            return leave(SwarmDownload::Fallback, "the swarm download failed: " + state->error, false);
        if (state->doneBytes > lastDone) {
            lastDone = state->doneBytes;
            lastProgress = now;
        }
        if (now - lastProgress > std::chrono::seconds(hooks.fallbackSeconds))
            return leave(SwarmDownload::Fallback,
                "no peer sent a verified piece in " + std::to_string(hooks.fallbackSeconds) + " s"
                    + (askError.empty() ? std::string() : " (the hub: " + askError + ")"),
                true);
        std::this_thread::sleep_for(kPollEvery);
    }
    session.flush(infoHash); // a verified piece may still be on its way to the file
    leave(SwarmDownload::Done, {}, false);
    // libtorrent checked every piece; the file is still checked as a whole
    // against the hub's SHA-256, as a chunked download is.
    auto actual = net::sha256OfFile(target);
    if (!actual || *actual != sha256)
        return leave(
            SwarmDownload::Fallback, torrent.fileName + " from the swarm does not match the hub's SHA-256", true);
    result.verdict = SwarmDownload::Done;
    return result;
}

} // namespace crowdtrain::swarm
