#include "net/control/value.h"

#include "core/utf8.h"
#include "net/wire/unpack.h"

#include <cstring>
#include <limits>
#include <msgpack.hpp>
#include <unordered_set>

namespace crowdtrain::control {

namespace {

const Value& nilValue()
{
    static const Value nil;
    return nil;
}

const std::vector<Value>& noItems()
{
    static const std::vector<Value> none;
    return none;
}

const std::vector<std::pair<std::string, Value>>& noEntries()
{
    static const std::vector<std::pair<std::string, Value>> none;
    return none;
}

} // namespace

Value::Value(const char* text)
{
    if (text)
        m_data = std::string(text);
}

Value Value::array()
{
    Value value;
    value.m_data = Items();
    return value;
}

Value Value::map()
{
    Value value;
    value.m_data = Entries();
    return value;
}

Value Value::binary(std::string bytes)
{
    Value value;
    value.m_data = Bytes{std::move(bytes)};
    return value;
}

void Value::setUnsigned(uint64_t value)
{
    // One representation per number: int64 whenever it fits.
    if (value <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        m_data = static_cast<int64_t>(value);
    else
        m_data = value;
}

bool Value::toBool(bool fallback) const
{
    const bool* value = std::get_if<bool>(&m_data);
    return value ? *value : fallback;
}

int64_t Value::toInt(int64_t fallback) const
{
    const int64_t* value = std::get_if<int64_t>(&m_data);
    return value ? *value : fallback; // a uint64 is above INT64_MAX
}

uint64_t Value::toUInt(uint64_t fallback) const
{
    if (const uint64_t* value = std::get_if<uint64_t>(&m_data))
        return *value;
    if (const int64_t* value = std::get_if<int64_t>(&m_data); value && *value >= 0)
        return static_cast<uint64_t>(*value);
    return fallback;
}

double Value::toDouble(double fallback) const
{
    if (const double* value = std::get_if<double>(&m_data))
        return *value;
    if (const int64_t* value = std::get_if<int64_t>(&m_data))
        return static_cast<double>(*value);
    if (const uint64_t* value = std::get_if<uint64_t>(&m_data))
        return static_cast<double>(*value);
    return fallback;
}

std::string Value::toString(std::string fallback) const
{
    const std::string* value = std::get_if<std::string>(&m_data);
    return value ? *value : fallback;
}

std::string Value::toBinary(std::string fallback) const
{
    const Bytes* value = std::get_if<Bytes>(&m_data);
    return value ? value->data : fallback;
}

std::size_t Value::size() const
{
    if (const Items* items = std::get_if<Items>(&m_data))
        return items->size();
    if (const Entries* entries = std::get_if<Entries>(&m_data))
        return entries->size();
    return 0;
}

const Value& Value::at(std::size_t index) const
{
    const Items* items = std::get_if<Items>(&m_data);
    return items && index < items->size() ? (*items)[index] : nilValue();
}

void Value::push(Value item)
{
    if (!isArray())
        m_data = Items();
    std::get<Items>(m_data).push_back(std::move(item));
}

const std::vector<Value>& Value::items() const
{
    const Items* items = std::get_if<Items>(&m_data);
    return items ? *items : noItems();
}

const Value& Value::operator[](std::string_view key) const
{
    if (const Entries* entries = std::get_if<Entries>(&m_data))
        for (const auto& [name, value] : *entries)
            if (name == key)
                return value;
    return nilValue();
}

Value& Value::set(std::string key, Value value)
{
    if (!isMap())
        m_data = Entries();
    Entries& entries = std::get<Entries>(m_data);
    for (auto& entry : entries)
        if (entry.first == key) {
            entry.second = std::move(value);
            return *this;
        }
    entries.emplace_back(std::move(key), std::move(value));
    return *this;
}

bool Value::has(std::string_view key) const
{
    if (const Entries* entries = std::get_if<Entries>(&m_data))
        for (const auto& entry : *entries)
            if (entry.first == key)
                return true;
    return false;
}

Value Value::take(std::string_view key)
{
    if (Entries* entries = std::get_if<Entries>(&m_data))
        for (auto& entry : *entries)
            if (entry.first == key) {
                // Moved out, then reset: std::exchange on the variant made
                // GCC 12 at -O3 report a maybe-uninitialised read.
                Value taken = std::move(entry.second);
                entry.second = Value();
                return taken;
            }
    return Value();
}

const std::vector<std::pair<std::string, Value>>& Value::entries() const
{
    const Entries* entries = std::get_if<Entries>(&m_data);
    return entries ? *entries : noEntries();
}

bool Value::operator==(const Value& other) const
{
    if (!isMap() || !other.isMap())
        return m_data == other.m_data;
    // Keys are distinct, so equal sizes and every key found equal is equality.
    const Entries& mine = std::get<Entries>(m_data);
    if (mine.size() != other.size())
        return false;
    for (const auto& [key, value] : mine)
        if (!other.has(key) || !(other[key] == value))
            return false;
    return true;
}

DecodeLimits DecodeLimits::reply()
{
    DecodeLimits limits;
    limits.maxBytes = kMaxReplyBytes;
    limits.maxBinary = kMaxReplyBytes;
    return limits;
}

DecodeLimits DecodeLimits::event()
{
    DecodeLimits limits;
    limits.maxBytes = kMaxEventBytes;
    limits.maxBinary = kMaxEventBytes;
    return limits;
}

// ---- msgpack and limits --------------------------------------------------

class ValueCodec {
public:
    static void pack(msgpack::sbuffer& out, const Value& value)
    {
        std::visit([&out](const auto& data) { packData(out, data); }, value.m_data);
    }

    // The unpacker has already enforced the caps; this checks what msgpack
    // itself allows and we do not (invalid UTF-8, non-str keys, duplicates).
    static Result<Value> fromObject(const msgpack::object& object);

    static Status checkLimits(const Value& value, const DecodeLimits& limits, std::size_t depth);

private:
    using Out = msgpack::sbuffer;
    using Packer = msgpack::packer<msgpack::sbuffer>;

    static void packText(Out& out, const std::string& text)
    {
        Packer(out).pack_str(static_cast<uint32_t>(text.size()));
        Packer(out).pack_str_body(text.data(), static_cast<uint32_t>(text.size()));
    }
    static void packData(Out& out, std::monostate) { Packer(out).pack_nil(); }
    static void packData(Out& out, bool value) { value ? Packer(out).pack_true() : Packer(out).pack_false(); }
    static void packData(Out& out, int64_t value) { Packer(out).pack_int64(value); }
    static void packData(Out& out, uint64_t value) { Packer(out).pack_uint64(value); }
    static void packData(Out& out, double value)
    {
        // Always float 64: msgpack-c's pack_double() writes an integral
        // double as an integer, which would come back as another kind.
        uint64_t bits = 0;
        std::memcpy(&bits, &value, sizeof bits);
        char bytes[9] = {static_cast<char>(0xcb)};
        for (int i = 0; i < 8; ++i)
            bytes[1 + i] = static_cast<char>(bits >> (56 - 8 * i));
        out.write(bytes, sizeof bytes);
    }
    static void packData(Out& out, const std::string& text) { packText(out, text); }
    static void packData(Out& out, const Value::Bytes& bytes)
    {
        Packer(out).pack_bin(static_cast<uint32_t>(bytes.data.size()));
        Packer(out).pack_bin_body(bytes.data.data(), static_cast<uint32_t>(bytes.data.size()));
    }
    static void packData(Out& out, const Value::Items& items)
    {
        Packer(out).pack_array(static_cast<uint32_t>(items.size()));
        for (const Value& item : items)
            pack(out, item);
    }
    static void packData(Out& out, const Value::Entries& entries)
    {
        Packer(out).pack_map(static_cast<uint32_t>(entries.size()));
        for (const auto& [key, item] : entries) {
            packText(out, key);
            pack(out, item);
        }
    }
};

namespace {

Error malformed(std::string message)
{
    return Error::make(errc::kMalformed, std::move(message));
}

Error tooLarge(std::string_view what, std::size_t size, std::string_view unit, std::size_t limit)
{
    return Error::make(errc::kTooLarge,
        std::string(what) + " of " + std::to_string(size) + " " + std::string(unit) + " exceeds the limit of "
            + std::to_string(limit));
}

} // namespace

Result<Value> ValueCodec::fromObject(const msgpack::object& object)
{
    switch (object.type) {
    case msgpack::type::NIL:
        return Value();
    case msgpack::type::BOOLEAN:
        return Value(object.via.boolean);
    case msgpack::type::POSITIVE_INTEGER:
        return Value(object.via.u64);
    case msgpack::type::NEGATIVE_INTEGER:
        return Value(object.via.i64);
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64:
        return Value(object.via.f64);
    case msgpack::type::STR: {
        const std::string_view text(object.via.str.ptr, object.via.str.size);
        if (!core::isValidUtf8(text))
            return malformed("a str is not valid UTF-8");
        return Value(text);
    }
    case msgpack::type::BIN:
        return Value::binary(std::string(object.via.bin.ptr, object.via.bin.size));
    case msgpack::type::ARRAY: {
        Value::Items items;
        items.reserve(object.via.array.size);
        for (uint32_t i = 0; i < object.via.array.size; ++i) {
            auto item = fromObject(object.via.array.ptr[i]);
            if (!item)
                return item.error();
            items.push_back(std::move(*item));
        }
        Value array;
        array.m_data = std::move(items);
        return array;
    }
    case msgpack::type::MAP: {
        Value::Entries entries;
        entries.reserve(object.via.map.size);
        std::unordered_set<std::string_view> seen;
        for (uint32_t i = 0; i < object.via.map.size; ++i) {
            const msgpack::object_kv& entry = object.via.map.ptr[i];
            if (entry.key.type != msgpack::type::STR)
                return malformed("a map key is not a str");
            const std::string_view key(entry.key.via.str.ptr, entry.key.via.str.size);
            if (!core::isValidUtf8(key))
                return malformed("a map key is not valid UTF-8");
            if (!seen.insert(key).second)
                return malformed("duplicate map key \"" + std::string(key) + "\"");
            auto value = fromObject(entry.val);
            if (!value)
                return value.error();
            entries.emplace_back(std::string(key), std::move(*value));
        }
        Value map;
        map.m_data = std::move(entries);
        return map;
    }
    case msgpack::type::EXT:
        break;
    }
    // Unreachable with the unpacker's ext cap of 0; kept for safety.
    return Error::make(errc::kTooLarge, "ext values are not allowed");
}

Status ValueCodec::checkLimits(const Value& value, const DecodeLimits& limits, std::size_t depth)
{
    if (const auto* text = std::get_if<std::string>(&value.m_data)) {
        if (text->size() > limits.maxString)
            return tooLarge("a string", text->size(), "bytes", limits.maxString);
        if (!core::isValidUtf8(*text))
            return malformed("a string is not valid UTF-8");
    }
    if (const auto* bytes = std::get_if<Value::Bytes>(&value.m_data); bytes && bytes->data.size() > limits.maxBinary)
        return tooLarge("binary data", bytes->data.size(), "bytes", limits.maxBinary);
    if (!value.isArray() && !value.isMap())
        return Status::success();
    if (depth + 1 > limits.maxDepth)
        return Error::make(errc::kTooLarge, "nesting deeper than " + std::to_string(limits.maxDepth) + " levels");
    if (const auto* items = std::get_if<Value::Items>(&value.m_data)) {
        if (items->size() > limits.maxArray)
            return tooLarge("an array", items->size(), "items", limits.maxArray);
        for (const Value& item : *items)
            if (Status status = checkLimits(item, limits, depth + 1); !status)
                return status;
        return Status::success();
    }
    const auto& entries = std::get<Value::Entries>(value.m_data);
    if (entries.size() > limits.maxMap)
        return tooLarge("a map", entries.size(), "entries", limits.maxMap);
    for (const auto& [key, item] : entries) {
        if (key.size() > limits.maxString)
            return tooLarge("a map key", key.size(), "bytes", limits.maxString);
        if (!core::isValidUtf8(key))
            return malformed("a map key is not valid UTF-8");
        if (Status status = checkLimits(item, limits, depth + 1); !status)
            return status;
    }
    return Status::success();
}

std::string encode(const Value& value)
{
    msgpack::sbuffer buffer;
    ValueCodec::pack(buffer, value);
    return std::string(buffer.data(), buffer.size());
}

Result<Value> decode(std::string_view bytes, const DecodeLimits& limits)
{
    net::UnpackLimits unpackLimits;
    unpackLimits.maxBytes = limits.maxBytes;
    unpackLimits.maxArray = limits.maxArray;
    unpackLimits.maxMap = limits.maxMap;
    unpackLimits.maxString = limits.maxString;
    unpackLimits.maxBinary = limits.maxBinary;
    unpackLimits.maxExtension = 0;
    unpackLimits.maxDepth = limits.maxDepth;
    auto handle = net::unpackUntrusted(bytes.data(), bytes.size(), unpackLimits);
    if (!handle) {
        // The unpacker's finer codes fold into the two of the contract.
        const Error& error = handle.error();
        const bool overCap = error.code == net::errc::kTooLarge || error.code == net::errc::kLimitExceeded;
        return Error::make(overCap ? errc::kTooLarge : errc::kMalformed, error.message);
    }
    return ValueCodec::fromObject(handle->get());
}

Status checkLimits(const Value& value, const DecodeLimits& limits)
{
    return ValueCodec::checkLimits(value, limits, 0);
}

} // namespace crowdtrain::control
