#pragma once

// The two halves every message is built from. MapWriter appends keyed fields
// and counts them, so a map header can never disagree with its content.
// MapView reads fields of an untrusted msgpack map: each accessor checks
// presence, type, range and size, and the first failure is kept as a
// "malformed" Error naming the field by path ("body.manifest[3].shape[0]");
// after a failure the accessors return empty values, so a decoder reads all
// its fields straight through and checks DecodeContext::failed() once.
// Not thread-safe; cheap to create.

#include "core/result.h"
#include "net/wire/text_checks.h"

#include <cstdint>
#include <msgpack.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace crowdtrain::net {

class ArrayWriter;

class MapWriter {
public:
    MapWriter& u64(std::string_view key, uint64_t value);
    MapWriter& f64(std::string_view key, double value);
    MapWriter& boolean(std::string_view key, bool value);
    MapWriter& str(std::string_view key, std::string_view value);
    MapWriter& bin(std::string_view key, std::string_view bytes);
    MapWriter& map(std::string_view key, const MapWriter& value);
    MapWriter& array(std::string_view key, const ArrayWriter& value);
    // Optional fields are left out when empty.
    MapWriter& optF64(std::string_view key, const std::optional<double>& value);

    // The encoded map: header then fields.
    std::string bytes() const;
    std::size_t size() const { return m_count; }

private:
    void key(std::string_view key);

    msgpack::sbuffer m_content;
    std::size_t m_count = 0;
};

class ArrayWriter {
public:
    ArrayWriter& u64(uint64_t value);
    ArrayWriter& str(std::string_view value);
    ArrayWriter& map(const MapWriter& value);

    std::string bytes() const;

private:
    msgpack::sbuffer m_content;
    std::size_t m_count = 0;
};

// The first error of one decode, shared by the views of nested maps.
class DecodeContext {
public:
    bool failed() const { return m_error.has_value(); }
    const Error& error() const { return *m_error; }
    void fail(const std::string& path, const std::string& what);

private:
    std::optional<Error> m_error;
};

// A msgpack str that must be valid UTF-8 of [minBytes, maxBytes].
struct StrRule {
    std::size_t maxBytes;
    std::size_t minBytes = 1;
};

class MapView {
public:
    // `object` may be null or not a map: the context then fails. An empty
    // path names the top-level map's fields by their keys alone.
    MapView(DecodeContext& context, const msgpack::object* object, std::string path);

    bool has(std::string_view key) const; // present and not nil
    uint64_t u64(std::string_view key, uint64_t min = 0, uint64_t max = UINT64_MAX);
    double f64(std::string_view key, double min = -1e300, double max = 1e300); // finite; an integer is accepted
    bool boolean(std::string_view key);
    std::string str(std::string_view key, StrRule rule);
    std::string bin(std::string_view key, std::size_t maxBytes, std::size_t minBytes = 0);
    // One of `allowed` (a closed set of tokens such as codec names).
    std::string oneOf(std::string_view key, std::initializer_list<std::string_view> allowed);
    std::string sha256Hex(std::string_view key); // 64 lowercase hex digits
    std::string curveKey(std::string_view key); // 40 Z85 characters
    std::string projectName(std::string_view key); // [a-z0-9-]{1,64}
    std::string displayText(std::string_view key, StrRule rule); // isDisplayText()

    std::optional<double> optF64(std::string_view key, double min = -1e300, double max = 1e300);

    MapView map(std::string_view key);
    // The maps of an array of at most maxCount maps.
    std::vector<MapView> maps(std::string_view key, std::size_t maxCount);
    std::vector<uint64_t> u64s(std::string_view key, std::size_t maxCount, uint64_t min = 0, uint64_t max = UINT64_MAX);
    std::vector<std::string> strs(std::string_view key, std::size_t maxCount, StrRule rule);

    DecodeContext& context() const { return *m_context; }
    const std::string& path() const { return m_path; }

    // Field path and checks for callers that validate relations between fields.
    std::string fieldPath(std::string_view key) const;
    void fail(std::string_view key, const std::string& what);

private:
    // The value of a present key of the expected type, else null (and fails).
    const msgpack::object* require(std::string_view key, msgpack::type::object_type type, const char* typeName);
    const msgpack::object* find(std::string_view key) const;

    DecodeContext* m_context;
    const msgpack::object* m_object = nullptr;
    std::string m_path;
};

} // namespace crowdtrain::net
