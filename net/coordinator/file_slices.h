#pragma once

// Reads a file slice by slice (the coordinator's payloads can be larger than
// it wants to hold at once); `each` may stop the walk by returning an error.

#include "core/result.h"
#include "net/wire/error_codes.h"

#include <fcntl.h>
#include <filesystem>
#include <string>
#include <string_view>
#include <unistd.h>

namespace crowdtrain::coordinator {

template <typename Each> Status forEachSlice(const std::filesystem::path& file, Each each)
{
    constexpr std::size_t kSliceBytes = 4u << 20;
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return Error::make(net::errc::kIoError, "cannot open " + file.string());
    std::string buffer(kSliceBytes, '\0');
    Status status;
    for (;;) {
        const ssize_t n = ::read(fd, buffer.data(), buffer.size());
        if (n < 0) {
            status = Error::make(net::errc::kIoError, "cannot read " + file.string());
            break;
        }
        if (n == 0)
            break;
        if (status = each(std::string_view(buffer.data(), std::size_t(n))); !status)
            break;
    }
    ::close(fd);
    return status;
}

} // namespace crowdtrain::coordinator
