#pragma once

// The frames of the control API (docs/protocol.md section 12), version 1:
//   request  {"v":1, "type":str, "id":uint, "body":map}
//   reply    {"v":1, "type":<request's>, "id":<request's>, "ok":true, "body":map}
//            {"v":1, "type":<request's>, "id":<request's>, "ok":false,
//             "error":{"code":str, "message":str}}
//   event    topic frame <type>, then {"v":1, "type":str, "seq":uint, "time_ms":uint, "body":map}
// Encoding, and decoding that checks every field. Unknown keys are ignored.
// Pure functions, thread-safe.

#include "core/result.h"
#include "net/control/value.h"

#include <cstdint>
#include <string>
#include <string_view>

namespace crowdtrain::control {

struct Request {
    std::string type;
    uint64_t id = 0;
    Value body; // a map
};

// What an error reply echoes of its request: whatever could be read.
struct RequestHeader {
    std::string type;
    uint64_t id = 0;
};

struct Reply {
    std::string type;
    uint64_t id = 0;
    bool ok = false;
    Value body; // when ok: a map
    Error error; // when not ok
};

struct Event {
    std::string type;
    uint64_t seq = 0;
    uint64_t timeMs = 0; // Unix time in milliseconds
    Value body; // a map
};

// 1 to kMaxTypeBytes bytes of printable ASCII other than space.
bool isMessageType(std::string_view type);

// Errors: "malformed" (a field missing or of the wrong type, a bad type
// name), "too_large", "unsupported_version". On error `header` holds the
// request's type and id when they could be read, for the error reply.
Result<Request> decodeRequest(std::string_view bytes, RequestHeader& header);
// `body` must be a map; not checked here (ControlClient checks requests).
std::string encodeRequest(std::string_view type, uint64_t id, const Value& body);

// The reply to `header`: ok:true with the body (nil counts as an empty
// map) or ok:false with the error. A body that is not a map, that breaks
// the decoder caps or whose frame exceeds kMaxReplyBytes becomes an
// "internal" or "too_large" error reply, so that every reply decodes.
std::string encodeReply(const RequestHeader& header, Result<Value> outcome);
Result<Reply> decodeReply(std::string_view bytes);

// Errors: "malformed" (a bad type or body), "too_large" (the frame or a
// cap of DecodeLimits::event()). The caller sends `type` as the topic frame.
Result<std::string> encodeEvent(std::string_view type, uint64_t seq, uint64_t timeMs, Value body);
// `topic` must equal the payload's type.
Result<Event> decodeEvent(std::string_view topic, std::string_view bytes);

} // namespace crowdtrain::control
