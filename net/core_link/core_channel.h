#pragma once

// The framing of the training core's local protocol (docs/protocol.md, §13
// "The training core"): over one UNIX stream socket, each frame is a 4-byte
// big-endian length N (1..kMaxCoreFrameBytes) followed by N bytes holding
// one msgpack map whose "type" field names the message. Big tensors never
// travel in frames: they are files whose paths the frames name.
//
// Both ends treat what they read as untrusted: a length out of range, bytes
// that are not one bounded msgpack map, or a map without a known "type" is
// an error ("malformed"), and the channel is then unusable.
//
// One thread uses a channel at a time; the channel owns its descriptor.

#include "core/result.h"
#include "net/wire/msgpack_io.h"

#include <cstddef>
#include <cstdint>
#include <msgpack.hpp>
#include <string>

namespace crowdtrain::corelink {

inline constexpr std::size_t kMaxCoreFrameBytes = 1u << 20;

// One received frame: its map and the "type" read from it.
struct Frame {
    std::string type;
    msgpack::object_handle handle;
    const msgpack::object& object() const { return handle.get(); }
};

class CoreChannel {
public:
    explicit CoreChannel(int fd = -1)
        : m_fd(fd)
    { }
    ~CoreChannel();
    CoreChannel(CoreChannel&& other) noexcept;
    CoreChannel& operator=(CoreChannel&& other) noexcept;
    CoreChannel(const CoreChannel&) = delete;
    CoreChannel& operator=(const CoreChannel&) = delete;

    bool open() const { return m_fd >= 0; }
    int fd() const { return m_fd; }
    void close();

    // Sends one message (made by message() and filled by the caller).
    // Errors: "closed" (the peer is gone), "too_large".
    Status send(const net::MapWriter& message);
    // Waits up to timeoutMs (-1: for ever) for the next frame. Errors:
    // "timeout", "closed" (the peer closed its end, or died), "malformed",
    // "io_error". After an error other than "timeout" the channel is closed.
    Result<Frame> receive(int timeoutMs);

private:
    Status fail(Error error);
    Result<bool> fill(std::size_t want, int timeoutMs);

    int m_fd = -1;
    std::string m_buffer; // bytes read and not yet returned as frames
};

// A message to send: a map whose first field is "type".
net::MapWriter message(std::string_view type);

// The error code for a peer that closed the channel.
inline constexpr std::string_view kClosed = "closed";

} // namespace crowdtrain::corelink
