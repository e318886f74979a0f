#pragma once

// Reading a text corpus for tokenization: which files it is made of, and
// their text in bounded chunks. Chunks end only where cutting cannot change
// how GPT-2's pre-tokenizer (or a char tokenizer) splits the text, so
// tokenizing chunk by chunk equals tokenizing each file whole.
// Free functions without shared state; thread-safe.

#include "core/result.h"

#include <cstddef>
#include <filesystem>
#include <functional>
#include <string_view>
#include <vector>

namespace crowdtrain::engine {

// Files named directly are taken whatever they hold. Folders are searched
// recursively for every file whatever its name, except hidden ones (a name
// starting with '.', or in such a folder) and binary ones (a NUL byte in
// the first 8 KiB). Each group comes out sorted, in argument order. A
// missing input, or no file at all, is an error; a file taken that is not
// UTF-8 fails later, when it is read, with its name.
Result<std::vector<std::filesystem::path>> listCorpusFiles(const std::vector<std::filesystem::path>& inputs);

// Calls visit with consecutive chunks of the file, each about chunkBytes
// (longer when no safe cut point comes sooner). Stops at the first error,
// from reading or from visit.
Status forEachChunk(const std::filesystem::path& file, std::size_t chunkBytes,
    const std::function<Status(std::string_view chunk)>& visit);

} // namespace crowdtrain::engine
