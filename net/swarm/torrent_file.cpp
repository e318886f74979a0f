#include "net/swarm/torrent_file.h"

#include "core/hex.h"
#include "net/wire/error_codes.h"

#include <libtorrent/create_torrent.hpp>
#include <libtorrent/file_storage.hpp>
#include <libtorrent/magnet_uri.hpp>
#include <libtorrent/torrent_info.hpp>

#include <algorithm>
#include <bit>
#include <system_error>

namespace crowdtrain::swarm {

namespace {

// BitTorrent's block: a small file (a small model's state) still gets
// enough pieces for volunteers to trade.
constexpr uint64_t kMinPieceBytes = 16 * 1024;
constexpr uint64_t kMaxPieceBytes = 16 * 1024 * 1024;
constexpr uint64_t kTargetPieces = 2048;
// A hub's .torrent for a 10 GB file is ~30 KB (v1 piece hashes) plus the v2
// piece layer (~40 KB); anything far past that is not ours.
constexpr std::size_t kMaxTorrentBytes = 8 * 1024 * 1024;

TorrentFile describe(const lt::torrent_info& info, std::string bytes)
{
    TorrentFile torrent;
    torrent.bytes = std::move(bytes);
    const lt::info_hash_t hashes = info.info_hashes();
    torrent.infoHash = core::hexOf(hashes.v1.data(), hashes.v1.size());
    torrent.infoHashV2 = core::hexOf(hashes.v2.data(), hashes.v2.size());
    torrent.magnet = lt::make_magnet_uri(info);
    torrent.fileName = info.files().file_name(lt::file_index_t(0)).to_string();
    torrent.fileBytes = uint64_t(info.files().file_size(lt::file_index_t(0)));
    torrent.pieceBytes = uint64_t(info.piece_length());
    return torrent;
}

} // namespace

uint64_t pieceBytesFor(uint64_t fileBytes)
{
    const uint64_t wanted = (fileBytes + kTargetPieces - 1) / kTargetPieces;
    return std::clamp(std::bit_ceil(std::max<uint64_t>(wanted, 1)), kMinPieceBytes, kMaxPieceBytes);
}

Result<TorrentFile> makeTorrent(const std::filesystem::path& file)
{
    std::error_code ec;
    if (!std::filesystem::is_regular_file(file, ec))
        return Error::make(net::errc::kInvalidArgument, file.string() + " is not a file");
    const uint64_t bytes = std::filesystem::file_size(file, ec);
    if (ec)
        return Error::make(net::errc::kIoError, "cannot read " + file.string() + ": " + ec.message());
    if (bytes == 0)
        return Error::make(net::errc::kInvalidArgument, file.string() + " is empty: a torrent needs a byte");
    try {
        lt::file_storage storage;
        storage.add_file(file.filename().string(), int64_t(bytes));
        lt::create_torrent creator(storage, int(pieceBytesFor(bytes)));
        creator.set_creator("crowdtrain");
        lt::error_code hashError;
        lt::set_piece_hashes(creator, file.parent_path().string(), hashError);
        if (hashError)
            return Error::make(net::errc::kIoError, "cannot hash " + file.string() + ": " + hashError.message());
        const std::vector<char> buffer = creator.generate_buf();
        std::string encoded(buffer.begin(), buffer.end());
        lt::torrent_info info(lt::span<const char>(buffer.data(), long(buffer.size())), lt::from_span);
        return describe(info, std::move(encoded));
    } catch (const std::exception& e) {
        return Error::make(net::errc::kIoError, "cannot make a torrent of " + file.string() + ": " + e.what());
    }
}

Result<TorrentFile> readTorrent(std::string_view bytes)
{
    if (bytes.empty() || bytes.size() > kMaxTorrentBytes)
        return Error::make(net::errc::kMalformed, "a torrent of " + std::to_string(bytes.size()) + " bytes");
    lt::error_code ec;
    lt::torrent_info info(lt::span<const char>(bytes.data(), long(bytes.size())), ec, lt::from_span);
    if (ec)
        return Error::make(net::errc::kMalformed, "not a torrent: " + ec.message());
    if (info.num_files() != 1)
        return Error::make(
            net::errc::kMalformed, "a torrent must hold one file, not " + std::to_string(info.num_files()));
    if (!info.info_hashes().has_v1() || !info.info_hashes().has_v2())
        return Error::make(net::errc::kMalformed, "a torrent must be hybrid (v1 and v2)");
    TorrentFile torrent = describe(info, std::string(bytes));
    if (torrent.fileName.empty() || torrent.fileName.find('/') != std::string::npos || torrent.fileName == "."
        || torrent.fileName == "..")
        return Error::make(net::errc::kMalformed, "a torrent's file name must be a plain name");
    return torrent;
}

} // namespace crowdtrain::swarm
