#include "net/wire/msgpack_io.h"

#include "core/utf8.h"
#include "net/wire/error_codes.h"
#include "net/wire/limits.h"

#include <cmath>
#include <cstring>

namespace crowdtrain::net {

namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;

void packStr(msgpack::sbuffer& buffer, std::string_view value)
{
    Packer packer(buffer);
    packer.pack_str(static_cast<uint32_t>(value.size()));
    packer.pack_str_body(value.data(), static_cast<uint32_t>(value.size()));
}

std::string withHeader(const msgpack::sbuffer& content, std::size_t count, bool isMap)
{
    msgpack::sbuffer header;
    Packer packer(header);
    if (isMap)
        packer.pack_map(static_cast<uint32_t>(count));
    else
        packer.pack_array(static_cast<uint32_t>(count));
    std::string bytes;
    bytes.reserve(header.size() + content.size());
    bytes.append(header.data(), header.size());
    bytes.append(content.data(), content.size());
    return bytes;
}

const char* typeName(msgpack::type::object_type type)
{
    switch (type) {
    case msgpack::type::NIL:
        return "nil";
    case msgpack::type::BOOLEAN:
        return "bool";
    case msgpack::type::POSITIVE_INTEGER:
        return "unsigned integer";
    case msgpack::type::NEGATIVE_INTEGER:
        return "negative integer";
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64:
        return "float";
    case msgpack::type::STR:
        return "str";
    case msgpack::type::BIN:
        return "bin";
    case msgpack::type::ARRAY:
        return "array";
    case msgpack::type::MAP:
        return "map";
    default:
        return "ext";
    }
}

std::string_view strOf(const msgpack::object& o)
{
    return {o.via.str.ptr, o.via.str.size};
}

// Checks one str element; returns false (and fails) when it breaks the rule.
bool checkStr(DecodeContext& context, const msgpack::object& o, const std::string& path, StrRule rule)
{
    if (o.type != msgpack::type::STR) {
        context.fail(path, std::string("expected str, got ") + typeName(o.type));
        return false;
    }
    const std::size_t size = o.via.str.size;
    if (size > rule.maxBytes || size < rule.minBytes) {
        context.fail(path,
            "expected a str of " + std::to_string(rule.minBytes) + " to " + std::to_string(rule.maxBytes)
                + " bytes, got " + std::to_string(size));
        return false;
    }
    if (!core::isValidUtf8(strOf(o))) {
        context.fail(path, "str is not valid UTF-8");
        return false;
    }
    return true;
}

bool checkU64(DecodeContext& context, const msgpack::object& o, const std::string& path, uint64_t min, uint64_t max)
{
    if (o.type != msgpack::type::POSITIVE_INTEGER) {
        context.fail(path, std::string("expected unsigned integer, got ") + typeName(o.type));
        return false;
    }
    if (o.via.u64 < min || o.via.u64 > max) {
        context.fail(path,
            "must be in [" + std::to_string(min) + ", " + std::to_string(max) + "], got " + std::to_string(o.via.u64));
        return false;
    }
    return true;
}

} // namespace

void MapWriter::key(std::string_view key)
{
    packStr(m_content, key);
    ++m_count;
}

MapWriter& MapWriter::u64(std::string_view name, uint64_t value)
{
    key(name);
    Packer(m_content).pack_uint64(value);
    return *this;
}

MapWriter& MapWriter::f64(std::string_view name, double value)
{
    key(name);
    // Always float64 (0xcb, big-endian): msgpack-c's pack_double would turn
    // integral values into integers.
    uint64_t bits = 0;
    std::memcpy(&bits, &value, sizeof bits);
    char bytes[9];
    bytes[0] = static_cast<char>(0xcb);
    for (int i = 0; i < 8; ++i)
        bytes[1 + i] = static_cast<char>(bits >> (56 - 8 * i));
    m_content.write(bytes, sizeof bytes);
    return *this;
}

MapWriter& MapWriter::boolean(std::string_view name, bool value)
{
    key(name);
    Packer(m_content).pack(value);
    return *this;
}

MapWriter& MapWriter::str(std::string_view name, std::string_view value)
{
    key(name);
    packStr(m_content, value);
    return *this;
}

MapWriter& MapWriter::bin(std::string_view name, std::string_view bytes)
{
    key(name);
    Packer packer(m_content);
    packer.pack_bin(static_cast<uint32_t>(bytes.size()));
    packer.pack_bin_body(bytes.data(), static_cast<uint32_t>(bytes.size()));
    return *this;
}

MapWriter& MapWriter::map(std::string_view name, const MapWriter& value)
{
    key(name);
    const std::string bytes = value.bytes();
    m_content.write(bytes.data(), bytes.size());
    return *this;
}

MapWriter& MapWriter::array(std::string_view name, const ArrayWriter& value)
{
    key(name);
    const std::string bytes = value.bytes();
    m_content.write(bytes.data(), bytes.size());
    return *this;
}

MapWriter& MapWriter::optF64(std::string_view name, const std::optional<double>& value)
{
    if (value)
        f64(name, *value);
    return *this;
}

std::string MapWriter::bytes() const
{
    return withHeader(m_content, m_count, true);
}

ArrayWriter& ArrayWriter::u64(uint64_t value)
{
    Packer(m_content).pack_uint64(value);
    ++m_count;
    return *this;
}

ArrayWriter& ArrayWriter::str(std::string_view value)
{
    packStr(m_content, value);
    ++m_count;
    return *this;
}

ArrayWriter& ArrayWriter::map(const MapWriter& value)
{
    const std::string bytes = value.bytes();
    m_content.write(bytes.data(), bytes.size());
    ++m_count;
    return *this;
}

std::string ArrayWriter::bytes() const
{
    return withHeader(m_content, m_count, false);
}

void DecodeContext::fail(const std::string& path, const std::string& what)
{
    if (!m_error)
        m_error = Error::make(errc::kMalformed, path + ": " + what);
}

MapView::MapView(DecodeContext& context, const msgpack::object* object, std::string path)
    : m_context(&context)
    , m_path(std::move(path))
{
    if (context.failed())
        return;
    if (!object || object->type != msgpack::type::MAP) {
        context.fail(m_path.empty() ? "message" : m_path,
            std::string("expected map, got ") + (object ? typeName(object->type) : "nothing"));
        return;
    }
    // Keys are distinct strs: a duplicate key would let two readers of one
    // message see different values.
    const msgpack::object_map& map = object->via.map;
    for (uint32_t i = 0; i < map.size; ++i) {
        if (map.ptr[i].key.type != msgpack::type::STR) {
            context.fail(m_path.empty() ? "message" : m_path, "a key is not a str");
            return;
        }
        for (uint32_t j = 0; j < i; ++j) {
            if (strOf(map.ptr[j].key) == strOf(map.ptr[i].key)) {
                context.fail(m_path.empty() ? "message" : m_path,
                    "duplicate key \"" + std::string(strOf(map.ptr[i].key)) + "\"");
                return;
            }
        }
    }
    m_object = object;
}

std::string MapView::fieldPath(std::string_view key) const
{
    return m_path.empty() ? std::string(key) : m_path + "." + std::string(key);
}

void MapView::fail(std::string_view key, const std::string& what)
{
    m_context->fail(fieldPath(key), what);
}

const msgpack::object* MapView::find(std::string_view key) const
{
    if (!m_object)
        return nullptr;
    const msgpack::object_map& map = m_object->via.map;
    for (uint32_t i = 0; i < map.size; ++i)
        if (strOf(map.ptr[i].key) == key)
            return &map.ptr[i].val;
    return nullptr;
}

bool MapView::has(std::string_view key) const
{
    const msgpack::object* value = find(key);
    return value && value->type != msgpack::type::NIL;
}

const msgpack::object* MapView::require(std::string_view key, msgpack::type::object_type type, const char* name)
{
    if (m_context->failed() || !m_object)
        return nullptr;
    const msgpack::object* value = find(key);
    if (!value) {
        fail(key, "missing");
        return nullptr;
    }
    if (value->type != type) {
        fail(key, std::string("expected ") + name + ", got " + typeName(value->type));
        return nullptr;
    }
    return value;
}

uint64_t MapView::u64(std::string_view key, uint64_t min, uint64_t max)
{
    if (m_context->failed() || !m_object)
        return 0;
    const msgpack::object* value = find(key);
    if (!value) {
        fail(key, "missing");
        return 0;
    }
    return checkU64(*m_context, *value, fieldPath(key), min, max) ? value->via.u64 : 0;
}

double MapView::f64(std::string_view key, double min, double max)
{
    if (m_context->failed() || !m_object)
        return 0;
    const msgpack::object* value = find(key);
    if (!value) {
        fail(key, "missing");
        return 0;
    }
    double number = 0;
    switch (value->type) {
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64:
        number = value->via.f64;
        break;
    case msgpack::type::POSITIVE_INTEGER:
        number = static_cast<double>(value->via.u64);
        break;
    case msgpack::type::NEGATIVE_INTEGER:
        number = static_cast<double>(value->via.i64);
        break;
    default:
        fail(key, std::string("expected float, got ") + typeName(value->type));
        return 0;
    }
    if (!std::isfinite(number)) {
        fail(key, "must be finite");
        return 0;
    }
    if (number < min || number > max) {
        fail(key,
            "must be in [" + std::to_string(min) + ", " + std::to_string(max) + "], got " + std::to_string(number));
        return 0;
    }
    return number;
}

std::optional<double> MapView::optF64(std::string_view key, double min, double max)
{
    if (!has(key))
        return std::nullopt;
    const double value = f64(key, min, max);
    return m_context->failed() ? std::nullopt : std::optional<double>(value);
}

bool MapView::boolean(std::string_view key)
{
    const msgpack::object* value = require(key, msgpack::type::BOOLEAN, "bool");
    return value && value->via.boolean;
}

std::string MapView::str(std::string_view key, StrRule rule)
{
    if (m_context->failed() || !m_object)
        return {};
    const msgpack::object* value = find(key);
    if (!value) {
        fail(key, "missing");
        return {};
    }
    return checkStr(*m_context, *value, fieldPath(key), rule) ? std::string(strOf(*value)) : std::string();
}

std::string MapView::bin(std::string_view key, std::size_t maxBytes, std::size_t minBytes)
{
    const msgpack::object* value = require(key, msgpack::type::BIN, "bin");
    if (!value)
        return {};
    if (value->via.bin.size > maxBytes || value->via.bin.size < minBytes) {
        fail(key,
            "expected a bin of " + std::to_string(minBytes) + " to " + std::to_string(maxBytes) + " bytes, got "
                + std::to_string(value->via.bin.size));
        return {};
    }
    return std::string(value->via.bin.ptr, value->via.bin.size);
}

std::string MapView::oneOf(std::string_view key, std::initializer_list<std::string_view> allowed)
{
    std::string value = str(key, {kMaxTypeChars});
    if (m_context->failed())
        return {};
    std::string names;
    for (std::string_view name : allowed) {
        if (name == value)
            return value;
        names += (names.empty() ? "" : ", ") + std::string(name);
    }
    fail(key, "must be one of " + names + ", got \"" + value + "\"");
    return {};
}

std::string MapView::sha256Hex(std::string_view key)
{
    std::string value = str(key, {kSha256HexChars, kSha256HexChars});
    if (!m_context->failed() && !isSha256Hex(value))
        fail(key, "expected 64 lowercase hex digits");
    return value;
}

std::string MapView::curveKey(std::string_view key)
{
    std::string value = str(key, {kCurveKeyChars, kCurveKeyChars});
    if (!m_context->failed() && !isCurveKeyText(value))
        fail(key, "expected a Z85 key of 40 characters");
    return value;
}

std::string MapView::projectName(std::string_view key)
{
    std::string value = str(key, {kMaxProjectNameChars});
    if (!m_context->failed() && !isProjectName(value))
        fail(key, "expected a project name of [a-z0-9-]");
    return value;
}

std::string MapView::displayText(std::string_view key, StrRule rule)
{
    std::string value = str(key, rule);
    if (!m_context->failed() && !isDisplayText(value))
        fail(key, "holds a control character, a line separator or bidirectional formatting");
    return value;
}

MapView MapView::map(std::string_view key)
{
    const msgpack::object* value = require(key, msgpack::type::MAP, "map");
    return MapView(*m_context, value, fieldPath(key));
}

std::vector<MapView> MapView::maps(std::string_view key, std::size_t maxCount)
{
    std::vector<MapView> views;
    const msgpack::object* value = require(key, msgpack::type::ARRAY, "array");
    if (!value)
        return views;
    if (value->via.array.size > maxCount) {
        fail(key, "at most " + std::to_string(maxCount) + " entries, got " + std::to_string(value->via.array.size));
        return views;
    }
    for (uint32_t i = 0; i < value->via.array.size && !m_context->failed(); ++i)
        views.emplace_back(*m_context, &value->via.array.ptr[i], fieldPath(key) + "[" + std::to_string(i) + "]");
    return views;
}

std::vector<uint64_t> MapView::u64s(std::string_view key, std::size_t maxCount, uint64_t min, uint64_t max)
{
    std::vector<uint64_t> values;
    const msgpack::object* value = require(key, msgpack::type::ARRAY, "array");
    if (!value)
        return values;
    if (value->via.array.size > maxCount) {
        fail(key, "at most " + std::to_string(maxCount) + " entries, got " + std::to_string(value->via.array.size));
        return values;
    }
    for (uint32_t i = 0; i < value->via.array.size; ++i) {
        const msgpack::object& element = value->via.array.ptr[i];
        if (!checkU64(*m_context, element, fieldPath(key) + "[" + std::to_string(i) + "]", min, max))
            return {};
        values.push_back(element.via.u64);
    }
    return values;
}

std::vector<std::string> MapView::strs(std::string_view key, std::size_t maxCount, StrRule rule)
{
    std::vector<std::string> values;
    const msgpack::object* value = require(key, msgpack::type::ARRAY, "array");
    if (!value)
        return values;
    if (value->via.array.size > maxCount) {
        fail(key, "at most " + std::to_string(maxCount) + " entries, got " + std::to_string(value->via.array.size));
        return values;
    }
    values.reserve(value->via.array.size);
    for (uint32_t i = 0; i < value->via.array.size; ++i) {
        const msgpack::object& element = value->via.array.ptr[i];
        if (!checkStr(*m_context, element, fieldPath(key) + "[" + std::to_string(i) + "]", rule))
            return {};
        values.emplace_back(strOf(element));
    }
    return values;
}

} // namespace crowdtrain::net
