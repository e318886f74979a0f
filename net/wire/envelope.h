#pragma once

// The frame around every message of protocol version 1:
//   request  {"v": 1, "type": str, "id": uint, "body": map}
//   reply    {"v": 1, "type": <request type> | "error", "id": <request id>, "body": map}
//   event    {"v": 1, "type": <event type>, "body": map}   (PUB, after a topic frame)
// and the typed encode/decode of the message structs in messages.h. A message
// struct M has `static constexpr std::string_view kType`, `void write(MapWriter&) const`
// and `static M read(MapView&)`. Decoding never throws; errors carry the codes
// of docs/protocol.md ("malformed", "unknown_type", "unsupported_version",
// "too_large"). Thread-safe (no shared state).

#include "core/result.h"
#include "net/wire/error_codes.h"
#include "net/wire/limits.h"
#include "net/wire/msgpack_io.h"

#include <cstdint>
#include <string>
#include <string_view>

namespace crowdtrain::net {

enum class EnvelopeKind { Request, Reply, Event };

struct Envelope {
    std::string type;
    uint64_t id = 0; // 0 for events
    msgpack::object_handle handle; // owns the decoded tree
    const msgpack::object* body = nullptr; // a map inside `handle`
};

inline constexpr std::string_view kErrorType = "error";

// Unpacks and checks the frame: size (too_large), msgpack (malformed), "v"
// (unsupported_version), "type" (for requests and events: a known type, else
// unknown_type; for replies: a request type or "error"), "id", "body".
Result<Envelope> decodeEnvelope(std::string_view bytes, EnvelopeKind kind);

// The request's "id" when it can be read at all, else 0: error replies to
// undecodable requests still echo it.
uint64_t bestEffortRequestId(std::string_view bytes);

bool isRequestType(std::string_view type);
bool isEventType(std::string_view type);

std::string encodeEnvelope(std::string_view type, uint64_t id, const MapWriter& body, EnvelopeKind kind);

// {"code", "message"}; an Error from the peer or for the peer.
struct ErrorReply {
    std::string code;
    std::string message;
    bool operator==(const ErrorReply&) const = default;
};
std::string encodeErrorReply(uint64_t id, const Error& error);

template <typename M> std::string encodeRequest(const M& message, uint64_t id)
{
    MapWriter body;
    message.write(body);
    return encodeEnvelope(M::kType, id, body, EnvelopeKind::Request);
}

template <typename M> std::string encodeReply(const M& message, uint64_t id)
{
    MapWriter body;
    message.write(body);
    return encodeEnvelope(M::kType, id, body, EnvelopeKind::Reply);
}

// The body of an envelope already decoded (the server's dispatch).
template <typename M> Result<M> decodeBody(const Envelope& envelope)
{
    if (envelope.type != M::kType)
        return Error::make(
            errc::kMalformed, "type: expected \"" + std::string(M::kType) + "\", got \"" + envelope.type + "\"");
    DecodeContext context;
    MapView body(context, envelope.body, "body");
    M message = M::read(body);
    if (context.failed())
        return context.error();
    return message;
}

template <typename M> Result<M> decodeRequest(std::string_view bytes)
{
    auto envelope = decodeEnvelope(bytes, EnvelopeKind::Request);
    if (!envelope)
        return envelope.error();
    return decodeBody<M>(*envelope);
}

// An error reply becomes the Error it carries (code as the server sent it).
Error errorFromReply(const Envelope& envelope);

// A reply envelope already decoded (the client matched its id).
template <typename M> Result<M> decodeReplyBody(const Envelope& envelope)
{
    if (envelope.type == kErrorType)
        return errorFromReply(envelope);
    return decodeBody<M>(envelope);
}

template <typename M> Result<M> decodeReply(std::string_view bytes)
{
    auto envelope = decodeEnvelope(bytes, EnvelopeKind::Reply);
    if (!envelope)
        return envelope.error();
    return decodeReplyBody<M>(*envelope);
}

} // namespace crowdtrain::net
