#include "net/volunteer/local_store.h"

#include "core/file_io.h"
#include "core/xdg.h"
#include "net/transfer/sha256.h"
#include "net/wire/error_codes.h"
#include "net/wire/text_checks.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace crowdtrain::volunteer {

static_assert(std::endian::native == std::endian::little, "float files and the wire are little-endian");

namespace {

constexpr std::string_view kMetaHeader = "crowdtrain-floats 1";
constexpr std::size_t kMaxMetaBytes = 4096;
constexpr std::size_t kMaxKeyFileBytes = 4096;

std::filesystem::path metaFile(const std::filesystem::path& file)
{
    std::filesystem::path meta = file;
    meta += ".meta";
    return meta;
}

} // namespace

Result<std::filesystem::path> defaultDataDir(const char* xdgDataHome, const char* home)
{
    return core::xdgFolder(xdgDataHome, home, ".local/share", "crowdtrain");
}

Result<std::filesystem::path> defaultDataDir()
{
    return core::xdgDataFolder("crowdtrain");
}

std::string floatsSha256(const std::vector<float>& values)
{
    return net::sha256Hex(
        std::string_view(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
}

Result<std::vector<float>> floatsFromBytes(const std::string& bytes, uint64_t elements)
{
    if (elements > bytes.size() / sizeof(float) || bytes.size() != elements * sizeof(float))
        return Error::make(net::errc::kBadSize,
            "expected " + std::to_string(elements) + " float32 values (" + std::to_string(elements * 4)
                + " bytes), got " + std::to_string(bytes.size()) + " bytes");
    std::vector<float> values(elements);
    std::memcpy(values.data(), bytes.data(), bytes.size());
    return values;
}

Result<FloatFileReader> FloatFileReader::open(const std::filesystem::path& file, uint64_t elements)
{
    std::error_code ec;
    const uint64_t bytes = std::filesystem::file_size(file, ec);
    if (ec)
        return Error::make(ec == std::errc::no_such_file_or_directory ? net::errc::kNotFound : net::errc::kIoError,
            "cannot read " + file.string() + ": " + ec.message());
    if (elements > bytes / sizeof(float) || bytes != elements * sizeof(float))
        return Error::make(net::errc::kBadSize,
            file.string() + " holds " + std::to_string(bytes) + " bytes, not " + std::to_string(elements)
                + " float32 values");
    FloatFileReader reader;
    reader.m_handle.reset(std::fopen(file.c_str(), "rb"));
    if (!reader.m_handle)
        return core::ioError("cannot open", file);
    reader.m_file = file;
    reader.m_elements = elements;
    return reader;
}

Status FloatFileReader::read(float* out, uint64_t count)
{
    if (std::fread(out, sizeof(float), count, m_handle.get()) != count)
        return Error::make(net::errc::kIoError, "cannot read " + m_file.string() + ": it ended early or failed");
    return Status::success();
}

Result<std::vector<float>> readFloatFile(const std::filesystem::path& file, uint64_t elements)
{
    auto reader = FloatFileReader::open(file, elements);
    if (!reader)
        return reader.error();
    std::vector<float> values(elements);
    if (Status read = reader->read(values.data(), elements); !read)
        return read.error();
    return values;
}

Status checkFloatFileFinite(const std::filesystem::path& file, uint64_t elements)
{
    auto reader = FloatFileReader::open(file, elements);
    if (!reader)
        return reader.error();
    std::vector<float> chunk(std::size_t(std::min<uint64_t>(elements, uint64_t(1) << 20)));
    for (uint64_t first = 0; first < elements; first += chunk.size()) {
        const uint64_t count = std::min<uint64_t>(chunk.size(), elements - first);
        if (Status read = reader->read(chunk.data(), count); !read)
            return read;
        for (uint64_t i = 0; i < count; ++i)
            if (!std::isfinite(chunk[i]))
                return Error::make(
                    net::errc::kNonFinite, file.string() + ": value " + std::to_string(first + i) + " is not finite");
    }
    return Status::success();
}

namespace {

// <file>.meta.next: the description of the bytes a save is about to put in
// place. A save writes it first, then <file>, then renames it over
// <file>.meta; a load that finds <file> matching .meta.next rather than
// .meta finishes the interrupted save. Any kill leaves a pair that loads.
std::filesystem::path pendingMetaFile(const std::filesystem::path& file)
{
    std::filesystem::path meta = file;
    meta += ".meta.next";
    return meta;
}

struct FloatsMeta {
    uint64_t version = 0;
    uint64_t elements = 0;
    std::string sha256;
    std::string manifestSha256;
};

Result<FloatsMeta> readMeta(const std::filesystem::path& metaPath)
{
    auto text = core::readFile(metaPath, kMaxMetaBytes);
    if (!text)
        return text.error();
    std::istringstream meta(*text);
    std::string header, key;
    std::getline(meta, header);
    FloatsMeta m;
    bool ok = header == kMetaHeader;
    ok = ok && (meta >> key >> m.version) && key == "version";
    ok = ok && (meta >> key >> m.elements) && key == "elements";
    ok = ok && (meta >> key >> m.sha256) && key == "sha256";
    ok = ok && (meta >> key >> m.manifestSha256) && key == "manifest";
    if (!ok)
        return Error::make(net::errc::kMalformed, metaPath.string() + ": not a crowdtrain-floats 1 description");
    if (m.manifestSha256 == "-")
        m.manifestSha256.clear();
    return m;
}

} // namespace

Status saveFloats(const std::filesystem::path& file, uint64_t version, const std::string& manifestSha256,
    const std::vector<float>& values)
{
    const std::string_view bytes(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
    std::ostringstream meta;
    meta << kMetaHeader << "\nversion " << version << "\nelements " << values.size() << "\nsha256 "
         << net::sha256Hex(bytes) << "\nmanifest " << (manifestSha256.empty() ? "-" : manifestSha256) << "\n";
    const std::filesystem::path pending = pendingMetaFile(file);
    if (Status written = core::writeFileAtomic(pending, meta.str(), 0600); !written)
        return written;
    if (Status written = core::writeFileAtomic(file, bytes, 0600); !written)
        return written;
    std::error_code ec;
    std::filesystem::rename(pending, metaFile(file), ec);
    if (ec)
        return Error::make(net::errc::kIoError, "cannot rename " + pending.string() + ": " + ec.message());
    return core::syncFolder(file.parent_path());
}

Result<std::optional<StoredFloats>> loadFloats(const std::filesystem::path& file)
{
    std::error_code ec;
    const std::filesystem::path pending = pendingMetaFile(file);
    const bool hasMeta = std::filesystem::exists(metaFile(file), ec);
    const bool hasPending = std::filesystem::exists(pending, ec);
    if (!std::filesystem::exists(file, ec) || (!hasMeta && !hasPending))
        return std::optional<StoredFloats>();
    // The description to check the bytes against: .meta, else (a first save
    // cut short) .meta.next; and .meta.next beside .meta, for a save killed
    // between putting the bytes in place and renaming it.
    auto meta = readMeta(hasMeta ? metaFile(file) : pending);
    if (!meta)
        return meta.error();
    std::optional<FloatsMeta> next;
    if (hasMeta && hasPending)
        if (auto read = readMeta(pending))
            next = std::move(*read);
    const uint64_t bytes = std::filesystem::file_size(file, ec);
    if (ec)
        return Error::make(net::errc::kIoError, "cannot read " + file.string() + ": " + ec.message());
    auto sized = [bytes](const FloatsMeta& m) {
        return m.elements <= (uint64_t(1) << 40) && m.elements * sizeof(float) == bytes;
    };
    // A size neither description has fails before the bytes are read.
    if (!sized(*meta) && !(next && sized(*next)))
        return Error::make(net::errc::kChecksumMismatch,
            file.string() + " holds " + std::to_string(bytes) + " bytes, its .meta says "
                + std::to_string(meta->elements) + " float32 values");
    StoredFloats stored;
    stored.values.resize(bytes / sizeof(float));
    std::ifstream in(file, std::ios::binary);
    if (!in.read(reinterpret_cast<char*>(stored.values.data()), std::streamsize(bytes)))
        return Error::make(net::errc::kIoError, "cannot read " + file.string());
    const std::string sha256 = floatsSha256(stored.values);
    auto matches = [&](const FloatsMeta& m) { return sized(m) && m.sha256 == sha256; };
    if (!matches(*meta) && next && matches(*next)) {
        std::filesystem::rename(pending, metaFile(file), ec); // finish the save
        meta = std::move(*next);
    } else if (next && matches(*meta)) {
        std::filesystem::remove(pending, ec); // killed before the bytes were replaced
    } else if (!hasMeta && matches(*meta)) {
        std::filesystem::rename(pending, metaFile(file), ec); // a first save cut short
    }
    if (!matches(*meta))
        return Error::make(net::errc::kChecksumMismatch, file.string() + " does not match the SHA-256 in its .meta");
    stored.version = meta->version;
    stored.manifestSha256 = meta->manifestSha256;
    stored.sha256 = sha256;
    return std::optional<StoredFloats>(std::move(stored));
}

void removeFloats(const std::filesystem::path& file)
{
    std::error_code ec;
    std::filesystem::remove(metaFile(file), ec);
    std::filesystem::remove(pendingMetaFile(file), ec);
    std::filesystem::remove(file, ec);
}

Result<ProjectFolder> ProjectFolder::open(const std::filesystem::path& dataDir, const std::string& project)
{
    if (!net::isProjectName(project))
        return Error::make(net::errc::kBadProject, "project name '" + project + "' is not a slug [a-z0-9-]{1,64}");
    const std::filesystem::path dir = dataDir / "projects" / project;
    std::error_code ec;
    std::filesystem::create_directories(dir / "downloads", ec);
    if (ec)
        return Error::make(net::errc::kIoError, "cannot create " + (dir / "downloads").string() + ": " + ec.message());
    return ProjectFolder(dir);
}

std::filesystem::path ProjectFolder::downloadTarget(const std::string& resource) const
{
    // Resource names may hold '/' ("checkpoint/40/model.safetensors"): keep one level.
    std::string name = resource;
    for (char& c : name)
        if (c == '/' || c == '\\')
            c = '_';
    if (name.empty() || name[0] == '.')
        name = "_" + name;
    return downloadsDir() / name;
}

void ProjectFolder::pruneDownloads(const std::string& keepResource) const
{
    const std::string keep = downloadTarget(keepResource).filename().string();
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(downloadsDir(), ec)) {
        const std::string name = entry.path().filename().string();
        if (name == keep || name.rfind(keep + ".", 0) == 0)
            continue;
        std::filesystem::remove(entry.path(), ec);
    }
}

std::filesystem::path identityKeyFile(const std::filesystem::path& dataDir)
{
    return dataDir / "identity.key";
}

Result<std::string> resolveServerKey(const std::string& keyOrFile)
{
    if (net::isCurveKeyText(keyOrFile))
        return keyOrFile;
    std::string path = keyOrFile;
    if (!path.empty() && path[0] == '@')
        path.erase(0, 1);
    if (path.empty())
        return Error::make(net::errc::kBadServerKey, "no server key given (40 Z85 characters, or @FILE)");
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec))
        return Error::make(
            net::errc::kBadServerKey, "'" + keyOrFile + "' is neither a 40-character Z85 key nor a readable key file");
    auto text = core::readFile(path, kMaxKeyFileBytes);
    if (!text)
        return Error::make(net::errc::kBadServerKey, text.error().message);
    std::istringstream words(*text);
    std::string word, previous;
    std::string firstKey;
    while (words >> word) {
        if (previous == "public" && net::isCurveKeyText(word))
            return word;
        if (firstKey.empty() && net::isCurveKeyText(word))
            firstKey = word;
        previous = word;
    }
    if (!firstKey.empty() && text->find("secret") == std::string::npos)
        return firstKey;
    return Error::make(net::errc::kBadServerKey, path + ": no 40-character Z85 public key in the file");
}

} // namespace crowdtrain::volunteer
