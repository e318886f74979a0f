#include "net/wire/envelope.h"

#include "core/utf8.h"
#include "net/wire/error_codes.h"
#include "net/wire/messages.h"
#include "net/wire/unpack.h"

namespace crowdtrain::net {

namespace {

UnpackLimits limitsFor(EnvelopeKind kind)
{
    UnpackLimits limits;
    limits.maxBytes = kind == EnvelopeKind::Request ? kMaxRequestBytes
        : kind == EnvelopeKind::Reply               ? kMaxReplyBytes
                                                    : kMaxEventBytes;
    limits.maxArray = kMaxChunkCount;
    limits.maxMap = kMaxMapEntries;
    limits.maxString = kMaxStringBytesAny;
    limits.maxBinary = kMaxChunkBytes;
    limits.maxExtension = 0;
    limits.maxDepth = kMaxNestingDepth;
    return limits;
}

// Cuts at a UTF-8 boundary so that a truncated text stays valid.
std::string truncateUtf8(std::string text, std::size_t maxBytes)
{
    if (text.size() <= maxBytes)
        return text;
    std::size_t end = maxBytes;
    while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80)
        --end;
    text.resize(end);
    return core::isValidUtf8(text) ? text : std::string();
}

} // namespace

bool isRequestType(std::string_view type)
{
    return RequestMessages::contains(type);
}

bool isEventType(std::string_view type)
{
    return EventMessages::contains(type);
}

Result<Envelope> decodeEnvelope(std::string_view bytes, EnvelopeKind kind)
{
    auto unpacked = unpackUntrusted(bytes.data(), bytes.size(), limitsFor(kind));
    if (!unpacked) {
        const Error& error = unpacked.error();
        if (error.code == errc::kTooLarge || error.code == errc::kLimitExceeded)
            return Error::make(errc::kTooLarge, error.message);
        return Error::make(errc::kMalformed, error.message);
    }
    Envelope envelope;
    envelope.handle = std::move(*unpacked);
    DecodeContext context;
    MapView root(context, &envelope.handle.get(), "");
    // The version first: a future version may change everything else.
    if (!context.failed() && root.has("v")) {
        const uint64_t version = root.u64("v");
        if (!context.failed() && version != kProtocolVersion)
            return Error::make(errc::kUnsupportedVersion,
                "protocol version " + std::to_string(version) + " is not supported; this peer speaks version "
                    + std::to_string(kProtocolVersion));
    } else {
        root.u64("v");
    }
    envelope.type = root.str("type", {kMaxTypeChars});
    if (kind != EnvelopeKind::Event)
        envelope.id = root.u64("id");
    MapView body = root.map("body");
    if (context.failed())
        return context.error();
    const bool known = kind == EnvelopeKind::Request ? isRequestType(envelope.type)
        : kind == EnvelopeKind::Event                ? isEventType(envelope.type)
                                                     : envelope.type == kErrorType || isRequestType(envelope.type);
    if (!known)
        return Error::make(errc::kUnknownType, "unknown message type \"" + envelope.type + "\"");
    // `body` was checked to be a map; keep a pointer into the handle.
    const msgpack::object_map& map = envelope.handle.get().via.map;
    for (uint32_t i = 0; i < map.size; ++i)
        if (std::string_view(map.ptr[i].key.via.str.ptr, map.ptr[i].key.via.str.size) == "body")
            envelope.body = &map.ptr[i].val;
    return envelope;
}

uint64_t bestEffortRequestId(std::string_view bytes)
{
    auto unpacked = unpackUntrusted(bytes.data(), bytes.size(), limitsFor(EnvelopeKind::Request));
    if (!unpacked)
        return 0;
    DecodeContext context;
    MapView root(context, &unpacked->get(), "");
    const uint64_t id = root.u64("id");
    return context.failed() ? 0 : id;
}

std::string encodeEnvelope(std::string_view type, uint64_t id, const MapWriter& body, EnvelopeKind kind)
{
    MapWriter root;
    root.u64("v", kProtocolVersion).str("type", type);
    if (kind != EnvelopeKind::Event)
        root.u64("id", id);
    root.map("body", body);
    return root.bytes();
}

std::string encodeErrorReply(uint64_t id, const Error& error)
{
    MapWriter body;
    body.str("code", truncateUtf8(error.code, kMaxErrorCodeChars));
    body.str("message", truncateUtf8(error.message, kMaxErrorMessageChars));
    return encodeEnvelope(kErrorType, id, body, EnvelopeKind::Reply);
}

Error errorFromReply(const Envelope& envelope)
{
    DecodeContext context;
    MapView body(context, envelope.body, "body");
    ErrorReply reply;
    reply.code = body.str("code", {kMaxErrorCodeChars});
    reply.message = body.str("message", {kMaxErrorMessageChars, 0});
    if (context.failed())
        return Error::make(errc::kMalformed, "error reply: " + context.error().message);
    return Error::make(reply.code, reply.message);
}

} // namespace crowdtrain::net
