#include "engine/corpus.h"

#include "core/file_io.h"
#include "engine/error_codes.h"
#include "engine/gpt2_pretokenizer.h"

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <string>

namespace crowdtrain::engine {
namespace {

bool isHidden(const std::filesystem::path& path)
{
    return path.filename().string().starts_with('.');
}

// A NUL byte in the first 8 KiB: an image, an archive, a compiled file (the
// rule git and grep use); UTF-16 text counts as binary too.
bool looksBinary(const std::filesystem::path& file)
{
    std::ifstream in(file, std::ios::binary);
    char head[8192];
    in.read(head, sizeof head);
    return std::find(head, head + in.gcount(), '\0') != head + in.gcount();
}

} // namespace

Result<std::vector<std::filesystem::path>> listCorpusFiles(const std::vector<std::filesystem::path>& inputs)
{
    std::vector<std::filesystem::path> files;
    for (const auto& input : inputs) {
        std::error_code ec;
        if (std::filesystem::is_regular_file(input, ec)) {
            files.push_back(input);
            continue;
        }
        if (!std::filesystem::is_directory(input, ec))
            return Error::make(errc::kNotFound, input.string() + ": no such file or folder");
        std::vector<std::filesystem::path> found;
        std::filesystem::recursive_directory_iterator it(
            input, std::filesystem::directory_options::follow_directory_symlink, ec);
        for (; !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
            if (isHidden(it->path())) {
                if (it->is_directory(ec))
                    it.disable_recursion_pending();
                continue;
            }
            if (it->is_regular_file(ec) && !looksBinary(it->path()))
                found.push_back(it->path());
        }
        if (ec)
            return Error::make(errc::kIoError, input.string() + ": cannot list: " + ec.message());
        std::sort(found.begin(), found.end());
        files.insert(files.end(), found.begin(), found.end());
    }
    if (files.empty())
        return Error::make(
            errc::kNotFound, "no input text: the folders hold no text files (hidden and binary files are skipped)");
    return files;
}

Status forEachChunk(const std::filesystem::path& file, std::size_t chunkBytes,
    const std::function<Status(std::string_view chunk)>& visit)
{
    std::ifstream in(file, std::ios::binary);
    if (!in)
        return core::ioError("cannot open", file, errno);
    chunkBytes = std::max<std::size_t>(chunkBytes, 1);
    std::string buffer;
    std::size_t scanFrom = 0; // no safe cut point before here
    while (true) {
        const std::size_t had = buffer.size();
        buffer.resize(had + chunkBytes);
        in.read(buffer.data() + had, static_cast<std::streamsize>(chunkBytes));
        buffer.resize(had + static_cast<std::size_t>(in.gcount()));
        if (in.bad())
            return core::ioError("cannot read", file, errno);
        if (in.eof()) {
            if (buffer.empty())
                return Status::success();
            return visit(buffer);
        }
        // Cut at the last safe point before the end (more text follows, so
        // the end itself is not safe); keep the tail for the next chunk.
        std::size_t cut = buffer.size() - 1;
        while (cut > scanFrom && !isSafeSplitPoint(buffer, cut))
            --cut;
        if (cut <= scanFrom) {
            scanFrom = buffer.size() - 1;
            continue;
        }
        if (Status status = visit(std::string_view(buffer).substr(0, cut)); !status)
            return status;
        buffer.erase(0, cut);
        scanFrom = 0;
    }
}

} // namespace crowdtrain::engine
