#pragma once

// Every number and error code of the control API (docs/protocol.md,
// section 12), spelled once. The control API is the local link between the
// desktop app or CLI and the daemon; it is not the coordinator protocol and
// shares only the decoder (net/wire/unpack.h) and some codes with it.
// Header-only.

#include "net/wire/error_codes.h"

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace crowdtrain::control {

inline constexpr uint64_t kControlVersion = 1;

// Socket file names inside the control folder.
inline constexpr std::string_view kControlSocketName = "control";
inline constexpr std::string_view kEventsSocketName = "events";

// Whole frames. A request frame over kMaxRequestBytes is never read (the
// ROUTER's ZMQ_MAXMSGSIZE drops the connection); the client refuses to send
// one. Replies are capped by the client's ZMQ_MAXMSGSIZE and checked by the
// server before sending.
inline constexpr std::size_t kMaxRequestBytes = 1u << 20; // 1 MiB
inline constexpr std::size_t kMaxReplyBytes = 64u << 20; // 64 MiB
inline constexpr std::size_t kMaxEventBytes = 1u << 20; // 1 MiB (the payload frame)

// Decoder caps, for every frame (requests, replies, events).
inline constexpr std::size_t kMaxDepth = 8; // nested maps and arrays; the envelope map is level 1
inline constexpr std::size_t kMaxStringBytes = 1u << 20; // one str (map keys too)
inline constexpr std::size_t kMaxArrayItems = 1u << 16; // 65 536
inline constexpr std::size_t kMaxMapEntries = 4096;

// Text fields of the envelope, in bytes.
inline constexpr std::size_t kMaxTypeBytes = 64; // request and event types: printable ASCII, no space
inline constexpr std::size_t kMaxErrorCodeBytes = 64;
inline constexpr std::size_t kMaxErrorMessageBytes = 4096;

// Socket queues, in messages. A client may have kReplyQueueLength requests
// in flight (sent, reply not read yet) and loses no reply; one more waiting
// for an answer while it has kReplyQueueLength waiting is answered "busy".
// The ROUTER's send queue per client is kReplyPipeLength: libzmq learns
// that replies left the queue only every kReplyPipeLength / 2 of them, so
// a queue of exactly kReplyQueueLength would count up to that many phantom
// replies and drop real ones. A reply to a client whose queue is full (one
// that sends without reading) is dropped (that client only sees its
// timeout). A client that sends without pause is read no faster than it is
// answered, with at most kRequestQueueLength requests waiting. Events to a
// subscriber that is kEventQueueLength events behind are dropped.
inline constexpr int kReplyQueueLength = 16;
inline constexpr int kReplyPipeLength = 64; // the ROUTER's ZMQ_SNDHWM
inline constexpr int kRequestQueueLength = 16;
inline constexpr int kEventQueueLength = 1000;
// Requests read but not answered yet, over all clients (the daemon answers
// slow ones late, off its serving thread); one more is answered "busy".
inline constexpr std::size_t kMaxRequestsInFlight = 64;
// Bytes of replies the daemon may hold for clients that have not read them,
// all clients together: the last kReplyPipeLength replies sent to each
// connected client count (those are all a client's queue can hold) until it
// disconnects. A reply that would pass the bound is replaced by a "busy"
// error reply.
inline constexpr std::size_t kMaxHeldReplyBytes = 256u << 20; // 256 MiB

// How long ControlClient::call waits by default.
inline constexpr int kDefaultCallTimeoutMs = 5000;

namespace errc {

// Sent by the daemon on the wire (error.code of an ok:false reply); a
// handler may add its own codes.
inline constexpr std::string_view kMalformed = net::errc::kMalformed;
inline constexpr std::string_view kUnsupportedVersion = net::errc::kUnsupportedVersion;
inline constexpr std::string_view kTooLarge = net::errc::kTooLarge;
inline constexpr std::string_view kInternal = net::errc::kInternal;
inline constexpr std::string_view kBusy = "busy"; // kMaxRequestsInFlight requests are waiting for answers

// Local: set-up and connection problems, never on the wire.
inline constexpr std::string_view kNoDaemon = "no_daemon"; // no folder, no socket, or no answer in time
inline constexpr std::string_view kInsecureControlDir = "insecure_control_dir";
inline constexpr std::string_view kNoRuntimeDir = "no_runtime_dir"; // XDG_RUNTIME_DIR is not absolute
inline constexpr std::string_view kBindFailed = "bind_failed";
inline constexpr std::string_view kIoError = net::errc::kIoError;
inline constexpr std::string_view kZmqError = net::errc::kZmqError;

} // namespace errc

} // namespace crowdtrain::control
