#include "engine/file_io.h"

#include "engine/error_codes.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>
#include <utility>

namespace crowdtrain::engine {

Error ioError(const std::filesystem::path& file, const std::string& what, int errorNumber)
{
    return Error::make(errc::kIoError, file.string() + ": " + what + ": " + std::strerror(errorNumber));
}

Result<std::string> readFile(const std::filesystem::path& file)
{
    std::error_code ec;
    if (!std::filesystem::exists(file, ec))
        return Error::make(errc::kNotFound, file.string() + ": no such file");
    if (std::filesystem::is_directory(file, ec))
        return Error::make(errc::kIoError, file.string() + ": is a folder, expected a file");
    std::ifstream in(file, std::ios::binary);
    if (!in)
        return ioError(file, "cannot open", errno);
    std::ostringstream content;
    content << in.rdbuf();
    if (in.bad())
        return ioError(file, "cannot read", errno);
    return std::move(content).str();
}

} // namespace crowdtrain::engine
