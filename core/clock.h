#pragma once

// The wall clock, as the wire and the files write it: milliseconds since
// the Unix epoch. Header-only; thread-safe.

#include <chrono>
#include <cstdint>

namespace crowdtrain::core {

inline int64_t unixNowMs()
{
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

} // namespace crowdtrain::core
