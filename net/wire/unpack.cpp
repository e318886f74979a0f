#include "net/wire/unpack.h"

#include "net/wire/error_codes.h"

#include <string>

namespace crowdtrain::net {

Result<msgpack::object_handle> unpackUntrusted(const char* data, std::size_t size, const UnpackLimits& limits)
{
    if (size > limits.maxBytes)
        return Error::make(errc::kTooLarge,
            "message of " + std::to_string(size) + " bytes exceeds the limit of " + std::to_string(limits.maxBytes));
    const msgpack::unpack_limit unpackLimit(
        limits.maxArray, limits.maxMap, limits.maxString, limits.maxBinary, limits.maxExtension, limits.maxDepth);
    std::size_t offset = 0;
    try {
        msgpack::object_handle handle = msgpack::unpack(data, size, offset, nullptr, nullptr, unpackLimit);
        if (offset != size)
            return Error::make(errc::kTrailingBytes, std::to_string(size - offset) + " bytes follow the message");
        return handle;
    } catch (const msgpack::depth_size_overflow& e) {
        return Error::make(errc::kLimitExceeded, std::string("message nests too deeply: ") + e.what());
    } catch (const msgpack::size_overflow& e) {
        return Error::make(errc::kLimitExceeded, std::string("message exceeds a size limit: ") + e.what());
    } catch (const msgpack::insufficient_bytes&) {
        return Error::make(errc::kMalformed, "message is truncated");
    } catch (const std::exception& e) {
        return Error::make(errc::kMalformed, std::string("message is not valid msgpack: ") + e.what());
    }
}

} // namespace crowdtrain::net
