#include "net/control/control_envelope.h"

#include "net/control/utf8_text.h"

namespace crowdtrain::control {

namespace {

Error malformed(std::string message)
{
    return Error::make(errc::kMalformed, std::move(message));
}

// Any integer from 0 to 2^64-1 (msgpack's uint 64 included).
bool isUnsigned(const Value& value)
{
    return value.kind() == Value::Kind::UInt || (value.kind() == Value::Kind::Int && value.toInt() >= 0);
}

// The envelope's common checks: a map whose "v" is this version.
Status checkVersion(const Value& root)
{
    if (!root.isMap())
        return malformed("the message is not a map");
    const Value& version = root["v"];
    if (!isUnsigned(version))
        return malformed("v: expected an unsigned integer");
    if (version.toUInt() != kControlVersion)
        return Error::make(errc::kUnsupportedVersion,
            "version " + std::to_string(version.toUInt()) + " is not supported; this side speaks version "
                + std::to_string(kControlVersion));
    return Status::success();
}

Status checkType(const Value& root)
{
    if (!isMessageType(root["type"].toString()))
        return malformed("type: expected 1 to " + std::to_string(kMaxTypeBytes) + " printable ASCII characters");
    return Status::success();
}

Status checkUInt(const Value& root, std::string_view key)
{
    if (!isUnsigned(root[key]))
        return malformed(std::string(key) + ": expected an unsigned integer");
    return Status::success();
}

Status checkMap(const Value& root, std::string_view key)
{
    if (!root[key].isMap())
        return malformed(std::string(key) + ": expected a map");
    return Status::success();
}

Value errorBody(const Error& error)
{
    return Value::map()
        .set("code", toValidUtf8(error.code, kMaxErrorCodeBytes))
        .set("message", toValidUtf8(error.message, kMaxErrorMessageBytes));
}

Value replyRoot(const RequestHeader& header)
{
    return Value::map().set("v", kControlVersion).set("type", header.type).set("id", header.id);
}

} // namespace

bool isMessageType(std::string_view type)
{
    if (type.empty() || type.size() > kMaxTypeBytes)
        return false;
    for (const char c : type)
        if (c <= ' ' || c > '~')
            return false;
    return true;
}

Result<Request> decodeRequest(std::string_view bytes, RequestHeader& header)
{
    header = {};
    auto root = decode(bytes, DecodeLimits::request());
    if (!root)
        return root.error();
    // Whatever can be read is echoed, even when the rest is wrong.
    if (isMessageType((*root)["type"].toString()))
        header.type = (*root)["type"].toString();
    header.id = (*root)["id"].toUInt();
    if (Status status = checkVersion(*root); !status)
        return status.error();
    for (Status status : {checkType(*root), checkUInt(*root, "id"), checkMap(*root, "body")})
        if (!status)
            return status.error();
    return Request{header.type, header.id, root->take("body")};
}

std::string encodeRequest(std::string_view type, uint64_t id, const Value& body)
{
    return encode(Value::map().set("v", kControlVersion).set("type", type).set("id", id).set("body", body));
}

std::string encodeReply(const RequestHeader& header, Result<Value> outcome)
{
    if (outcome && outcome->isNil())
        outcome = Value::map();
    if (outcome && !outcome->isMap())
        outcome = Error::make(errc::kInternal, "the daemon's handler for \"" + header.type + "\" returned a non-map");
    if (outcome) {
        Value root = replyRoot(header).set("ok", true).set("body", std::move(*outcome));
        Status fits = checkLimits(root, DecodeLimits::reply());
        if (fits) {
            std::string bytes = encode(root);
            if (bytes.size() <= kMaxReplyBytes)
                return bytes;
            fits = Error::make(errc::kTooLarge,
                "the reply of " + std::to_string(bytes.size()) + " bytes exceeds the limit of "
                    + std::to_string(kMaxReplyBytes));
        }
        outcome = Error::make(
            fits.error().code == errc::kTooLarge ? errc::kTooLarge : errc::kInternal, "reply: " + fits.error().message);
    }
    return encode(replyRoot(header).set("ok", false).set("error", errorBody(outcome.error())));
}

Result<Reply> decodeReply(std::string_view bytes)
{
    auto root = decode(bytes, DecodeLimits::reply());
    if (!root)
        return root.error();
    if (Status status = checkVersion(*root); !status)
        return status.error();
    // The type is empty in the reply to a request whose type was unreadable.
    const Value& type = (*root)["type"];
    if (!type.isString() || (!type.toString().empty() && !isMessageType(type.toString())))
        return malformed("type: expected a request type");
    if (Status status = checkUInt(*root, "id"); !status)
        return status.error();
    const Value& ok = (*root)["ok"];
    if (!ok.isBool())
        return malformed("ok: expected true or false");
    Reply reply;
    reply.type = (*root)["type"].toString();
    reply.id = (*root)["id"].toUInt();
    reply.ok = ok.toBool();
    if (reply.ok) {
        if (Status status = checkMap(*root, "body"); !status)
            return status.error();
        reply.body = root->take("body");
        return reply;
    }
    const Value& error = (*root)["error"];
    if (!error["code"].isString() || error["code"].toString().empty() || !error["message"].isString())
        return malformed("error: expected a map with a code and a message");
    reply.error = Error::make(error["code"].toString(), error["message"].toString());
    return reply;
}

Result<std::string> encodeEvent(std::string_view type, uint64_t seq, uint64_t timeMs, Value body)
{
    if (!isMessageType(type))
        return malformed("event type \"" + toValidUtf8(type, kMaxTypeBytes) + "\" is not 1 to "
            + std::to_string(kMaxTypeBytes) + " printable ASCII characters");
    if (body.isNil())
        body = Value::map();
    if (!body.isMap())
        return malformed("the body of event \"" + std::string(type) + "\" is not a map");
    const Value root = Value::map()
                           .set("v", kControlVersion)
                           .set("type", type)
                           .set("seq", seq)
                           .set("time_ms", timeMs)
                           .set("body", std::move(body));
    if (Status fits = checkLimits(root, DecodeLimits::event()); !fits)
        return fits.error();
    std::string bytes = encode(root);
    if (bytes.size() > kMaxEventBytes)
        return Error::make(errc::kTooLarge,
            "event \"" + std::string(type) + "\" of " + std::to_string(bytes.size()) + " bytes exceeds the limit of "
                + std::to_string(kMaxEventBytes));
    return bytes;
}

Result<Event> decodeEvent(std::string_view topic, std::string_view bytes)
{
    auto root = decode(bytes, DecodeLimits::event());
    if (!root)
        return root.error();
    for (Status status : {checkVersion(*root), checkType(*root), checkUInt(*root, "seq"), checkUInt(*root, "time_ms"),
             checkMap(*root, "body")})
        if (!status)
            return status.error();
    Event event;
    event.type = (*root)["type"].toString();
    if (event.type != topic)
        return malformed("the topic frame \"" + toValidUtf8(topic, kMaxTypeBytes) + "\" is not the event's type");
    event.seq = (*root)["seq"].toUInt();
    event.timeMs = (*root)["time_ms"].toUInt();
    event.body = root->take("body");
    return event;
}

} // namespace crowdtrain::control
