#pragma once

// Bounded msgpack decoding of untrusted bytes. Every message from a peer goes
// through unpackUntrusted() before any field is read: the byte size, nesting
// depth and container sizes are capped, so a hostile peer cannot make us
// allocate without bound. Thread-safe (no shared state).

#include "core/result.h"

#include <cstddef>
#include <msgpack.hpp>

namespace crowdtrain::net {

struct UnpackLimits {
    std::size_t maxBytes = 64u << 20;
    std::size_t maxArray = 1u << 16;
    std::size_t maxMap = 256;
    std::size_t maxString = 1u << 16;
    std::size_t maxBinary = 64u << 20;
    std::size_t maxExtension = 0;
    std::size_t maxDepth = 8;
};

// Decodes exactly one msgpack value occupying all of [data, data + size).
// Errors: "too_large", "malformed", "trailing_bytes", "limit_exceeded".
Result<msgpack::object_handle> unpackUntrusted(const char* data, std::size_t size, const UnpackLimits& limits = {});

} // namespace crowdtrain::net
