#include "engine/file_io.h"

#include "engine/error_codes.h"

#include <cstring>

namespace crowdtrain::engine {

Error ioError(const std::filesystem::path& file, const std::string& what, int errorNumber)
{
    return Error::make(errc::kIoError, file.string() + ": " + what + ": " + std::strerror(errorNumber));
}

Result<std::string> readFile(const std::filesystem::path& file)
{
    return core::readFile(file);
}

} // namespace crowdtrain::engine
