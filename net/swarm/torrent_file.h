#pragma once

// A published file as a BitTorrent torrent (net/swarm/swarm_session.h seeds
// and downloads it): one file per torrent, hybrid v1 + v2 (BEP 52), so
// both the 20-byte v1 info-hash (what peers exchange in the handshake) and
// the v2 per-file Merkle root exist. The piece size grows with the file
// (pieceBytesFor): a 500 MB GPT-2 checkpoint gets ~1,900 pieces of 256 KiB,
// a 10 GB state ~1,250 pieces of 8 MiB.
//
// A torrent names no tracker and no web seed: the coordinator tells its
// volunteers who holds a file through its own protocol (`swarm_peers`,
// docs/protocol.md), so no public tracker or DHT is needed.

#include "core/result.h"

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace crowdtrain::swarm {

struct TorrentFile {
    std::string bytes; // the bencoded .torrent
    std::string infoHash; // v1 info-hash, 40 lowercase hex digits (the swarm's key)
    std::string infoHashV2; // v2 info-hash (SHA-256 of the info dictionary), 64 hex digits
    std::string magnet; // magnet:?xt=urn:btih:...&xt=urn:btmh:...&dn=<name>
    std::string fileName; // the one file's name
    uint64_t fileBytes = 0;
    uint64_t pieceBytes = 0;
};

// The piece size for a file of `fileBytes`: the smallest power of two in
// [16 KiB, 16 MiB] that cuts it into at most 2,048 pieces.
uint64_t pieceBytesFor(uint64_t fileBytes);

// Hashes `file` (v1 SHA-1 pieces and the v2 SHA-256 tree) and makes its
// torrent. Errors: "io_error" (the file cannot be read), "invalid_argument"
// (an empty file or a directory).
Result<TorrentFile> makeTorrent(const std::filesystem::path& file);

// Parses and checks a .torrent received from a hub: it must hold exactly
// one file, be hybrid (v1 and v2), and carry a plain file name.
// Errors: "malformed".
Result<TorrentFile> readTorrent(std::string_view bytes);

} // namespace crowdtrain::swarm
