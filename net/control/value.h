#pragma once

// A dynamic msgpack value, the body of every control-API message: nil,
// bool, integer, double, string, binary, array or map. Integers are kept as
// int64 whenever they fit and as uint64 only above INT64_MAX, so a value
// compares equal to itself after a round trip whatever format carried it.
// Maps have string keys, distinct, in insertion order (set() on an existing
// key replaces its value in place); equality ignores their order.
//
// encode() and decode() convert to and from msgpack bytes; decode() is
// bounded (net/wire/unpack.h) and safe on untrusted bytes. toJson() and
// fromJson() do the same for JSON text (value_json.cpp, nlohmann::json).
// A Value is a plain value type: copies are independent; thread-safe as
// `const` (no shared state).

#include "core/result.h"
#include "net/control/control_protocol.h"

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace crowdtrain::control {

class Value {
public:
    enum class Kind { Nil, Bool, Int, UInt, Double, String, Binary, Array, Map };

    Value() = default; // nil
    Value(bool value)
        : m_data(value)
    { }
    template <std::integral T>
    requires(!std::same_as<T, bool>) Value(T value)
    {
        if constexpr (std::is_signed_v<T>)
            m_data = static_cast<int64_t>(value);
        else
            setUnsigned(static_cast<uint64_t>(value));
    }
    Value(double value)
        : m_data(value)
    { }
    Value(const char* text); // nullptr: nil
    Value(std::string_view text)
        : m_data(std::string(text))
    { }
    Value(std::string text)
        : m_data(std::move(text))
    { }

    static Value array();
    static Value map();
    static Value binary(std::string bytes);

    Kind kind() const { return static_cast<Kind>(m_data.index()); }
    bool isNil() const { return kind() == Kind::Nil; }
    bool isBool() const { return kind() == Kind::Bool; }
    bool isInt() const { return kind() == Kind::Int || kind() == Kind::UInt; }
    bool isDouble() const { return kind() == Kind::Double; }
    bool isNumber() const { return isInt() || isDouble(); }
    bool isString() const { return kind() == Kind::String; }
    bool isBinary() const { return kind() == Kind::Binary; }
    bool isArray() const { return kind() == Kind::Array; }
    bool isMap() const { return kind() == Kind::Map; }

    // The value when it has that kind (and, for integers, fits), else
    // `fallback`. toDouble() converts integers; nothing else converts.
    bool toBool(bool fallback = false) const;
    int64_t toInt(int64_t fallback = 0) const;
    uint64_t toUInt(uint64_t fallback = 0) const;
    double toDouble(double fallback = 0) const;
    std::string toString(std::string fallback = {}) const;
    std::string toBinary(std::string fallback = {}) const;

    // Arrays. size() is the number of items or entries (0 for scalars);
    // at() out of range, or on a non-array, is a nil Value. push() on a
    // value that is not an array first makes it an empty array.
    std::size_t size() const;
    const Value& at(std::size_t index) const;
    void push(Value item);
    const std::vector<Value>& items() const;

    // Maps. operator[] on an absent key, or on a non-map, is a nil Value.
    // set() on a value that is not a map first makes it an empty map; it
    // returns *this, for chaining.
    const Value& operator[](std::string_view key) const;
    Value& set(std::string key, Value value);
    bool has(std::string_view key) const;
    // Moves the value of `key` out, leaving nil in its place (nil when absent).
    Value take(std::string_view key);
    const std::vector<std::pair<std::string, Value>>& entries() const;

    bool operator==(const Value& other) const;

    // JSON, for the CLI's --json output, logs and the daemon's files:
    // compact, or with `indent` spaces per level when it is 0 or more. Map
    // keys keep their order; a double always has a '.' or an exponent
    // (2.0, 1e+300), a non-finite one is null; binary is a base64 string
    // (RFC 4648, padded); bytes that are not UTF-8 become U+FFFD.
    std::string toJson(int indent = -1) const;

    // Exactly one JSON value spanning `text` (whitespace aside), within
    // decode()'s caps for a request (DecodeLimits{}: 1 MiB of text, depth 8).
    // Integers are Int, or UInt above INT64_MAX; numbers with a '.' or an
    // exponent, or beyond uint64, are Double. JSON has no binary: what
    // toJson() wrote as base64 reads back as a String. Errors: "malformed"
    // (not JSON, with nlohmann's line and column; a duplicate key),
    // "too_large" (over a cap).
    static Result<Value> fromJson(std::string_view text);

private:
    friend class ValueCodec; // value.cpp: msgpack and limits without copies
    friend class JsonBuilder; // value_json.cpp: a Value from JSON without copies

    struct Bytes {
        std::string data;
        bool operator==(const Bytes&) const = default;
    };
    using Items = std::vector<Value>;
    using Entries = std::vector<std::pair<std::string, Value>>;

    void setUnsigned(uint64_t value);

    // The order of the alternatives is Kind's.
    std::variant<std::monostate, bool, int64_t, uint64_t, double, std::string, Bytes, Items, Entries> m_data;
};

// Caps of decode() (docs/protocol.md section 12). The defaults are a
// request's; reply() and event() relax the frame size.
struct DecodeLimits {
    std::size_t maxBytes = kMaxRequestBytes;
    std::size_t maxDepth = kMaxDepth; // the outermost map or array is level 1; scalars do not count
    std::size_t maxString = kMaxStringBytes;
    std::size_t maxBinary = kMaxRequestBytes;
    std::size_t maxArray = kMaxArrayItems;
    std::size_t maxMap = kMaxMapEntries;

    static DecodeLimits request() { return {}; }
    static DecodeLimits reply();
    static DecodeLimits event();
};

// msgpack bytes: the shortest integer formats, float 64, str, bin, array, map.
std::string encode(const Value& value);

// Exactly one msgpack value spanning all of `bytes`. Errors: "too_large"
// (over a cap of `limits`, an ext value), "malformed" (truncated, trailing
// bytes, invalid UTF-8 in a str, a map key that is not a str, a duplicate key).
Result<Value> decode(std::string_view bytes, const DecodeLimits& limits = {});

// Whether decode() with `limits` would accept encode(value), all but the
// byte size: depth, string, binary and container sizes ("too_large") and
// UTF-8 in strings and keys ("malformed").
Status checkLimits(const Value& value, const DecodeLimits& limits = {});

} // namespace crowdtrain::control
