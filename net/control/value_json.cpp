// Value and JSON, through nlohmann::json: toJson() for the CLI's --json
// output, logs and the daemon's settings file, fromJson() to read such text
// back. Ours are only what JSON lacks (binary, as base64) and the UTF-8
// repair of toValidUtf8.
#include "net/control/value.h"

#include "net/control/utf8_text.h"

#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_set>
#include <vector>

namespace crowdtrain::control {

namespace {

// ordered_json keeps a map's keys in the Value's order.
using Json = nlohmann::ordered_json;

std::string base64(std::string_view bytes)
{
    static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    out.reserve((bytes.size() + 2) / 3 * 4);
    for (std::size_t i = 0; i < bytes.size(); i += 3) {
        const std::size_t left = bytes.size() - i;
        uint32_t group = static_cast<uint32_t>(static_cast<unsigned char>(bytes[i])) << 16;
        if (left > 1)
            group |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8;
        if (left > 2)
            group |= static_cast<unsigned char>(bytes[i + 2]);
        out += kAlphabet[(group >> 18) & 0x3F];
        out += kAlphabet[(group >> 12) & 0x3F];
        out += left > 1 ? kAlphabet[(group >> 6) & 0x3F] : '=';
        out += left > 2 ? kAlphabet[group & 0x3F] : '=';
    }
    return out;
}

Json toNlohmann(const Value& value)
{
    switch (value.kind()) {
    case Value::Kind::Nil:
        return nullptr;
    case Value::Kind::Bool:
        return value.toBool();
    case Value::Kind::Int:
        return value.toInt();
    case Value::Kind::UInt:
        return value.toUInt();
    case Value::Kind::Double:
        return value.toDouble(); // dump() writes a non-finite one as null
    case Value::Kind::String:
        return toValidUtf8(value.toString());
    case Value::Kind::Binary:
        return base64(value.toBinary());
    case Value::Kind::Array: {
        Json array = Json::array();
        for (const Value& item : value.items())
            array.push_back(toNlohmann(item));
        return array;
    }
    case Value::Kind::Map: {
        Json object = Json::object();
        auto& entries = object.get_ref<Json::object_t&>();
        // A Value's keys are distinct: append, without ordered_map's linear
        // search for an existing key.
        for (const auto& [key, item] : value.entries())
            entries.Json::object_t::Container::emplace_back(toValidUtf8(key), toNlohmann(item));
        return object;
    }
    }
    return nullptr;
}

} // namespace

// A Value straight from nlohmann's SAX events, with no json tree between.
// The depth is capped while parsing: a Value is destroyed recursively, so a
// deeply nested text must be refused before it is built.
class JsonBuilder : public nlohmann::json::json_sax_t {
public:
    explicit JsonBuilder(std::size_t maxDepth)
        : m_maxDepth(maxDepth)
    { }

    bool null() override { return add(Value()); }
    bool boolean(bool value) override { return add(Value(value)); }
    bool number_integer(number_integer_t value) override { return add(Value(value)); }
    bool number_unsigned(number_unsigned_t value) override { return add(Value(value)); } // int64 when it fits
    bool number_float(number_float_t value, const string_t&) override { return add(Value(value)); }
    bool string(string_t& text) override { return add(Value(std::move(text))); }
    bool binary(binary_t&) override { return fail(errc::kMalformed, "binary data in JSON text"); } // never in text

    bool start_object(std::size_t) override { return open(Value::map()); }
    bool key(string_t& key) override
    {
        Frame& frame = m_open.back();
        if (!frame.keys.insert(key).second)
            return fail(errc::kMalformed, "duplicate map key \"" + key + "\"");
        frame.key = std::move(key);
        return true;
    }
    bool end_object() override { return close(); }
    bool start_array(std::size_t) override { return open(Value::array()); }
    bool end_array() override { return close(); }

    bool parse_error(std::size_t, const std::string&, const nlohmann::json::exception& error) override
    {
        // "[json.exception.parse_error.101] parse error at line 1, column 9: ...":
        // the part after the tag. It quotes the text last read, which may be
        // long or not UTF-8, and the message may reach a peer (a notice).
        std::string_view message = error.what();
        if (const auto tag = message.find("] "); tag != std::string_view::npos)
            message.remove_prefix(tag + 2);
        return fail(errc::kMalformed, toValidUtf8(message, kMaxErrorMessageBytes));
    }

    Result<Value> result()
    {
        if (m_error)
            return *m_error;
        return std::move(m_root);
    }

private:
    struct Frame {
        Value container;
        std::string key = {}; // maps: the key of the next value
        std::unordered_set<std::string> keys = {};
    };

    bool add(Value value)
    {
        if (m_open.empty()) {
            m_root = std::move(value);
            return true;
        }
        Frame& frame = m_open.back();
        if (auto* items = std::get_if<Value::Items>(&frame.container.m_data))
            items->push_back(std::move(value));
        else
            std::get<Value::Entries>(frame.container.m_data).emplace_back(std::move(frame.key), std::move(value));
        return true;
    }
    bool open(Value container)
    {
        if (m_open.size() + 1 > m_maxDepth)
            return fail(errc::kTooLarge, "nesting deeper than " + std::to_string(m_maxDepth) + " levels");
        m_open.push_back({std::move(container)});
        return true;
    }
    bool close()
    {
        Value done = std::move(m_open.back().container);
        m_open.pop_back();
        return add(std::move(done));
    }
    bool fail(std::string_view code, std::string message)
    {
        m_error = Error::make(code, std::move(message));
        return false; // stops the parser
    }

    std::size_t m_maxDepth;
    std::vector<Frame> m_open; // the maps and arrays not closed yet, outermost first
    Value m_root;
    std::optional<Error> m_error;
};

std::string Value::toJson(int indent) const
{
    // Strings are valid UTF-8 by now; "replace" only keeps dump() from ever throwing.
    return toNlohmann(*this).dump(indent, ' ', false, Json::error_handler_t::replace);
}

Result<Value> Value::fromJson(std::string_view text)
{
    const DecodeLimits limits;
    if (text.size() > limits.maxBytes)
        return Error::make(errc::kTooLarge,
            "JSON text of " + std::to_string(text.size()) + " bytes exceeds the limit of "
                + std::to_string(limits.maxBytes));
    JsonBuilder builder(limits.maxDepth);
    nlohmann::json::sax_parse(text.begin(), text.end(), &builder);
    auto value = builder.result();
    if (!value)
        return value;
    // The text's size bounds what was built; the other caps are decode()'s.
    if (Status within = checkLimits(*value, limits); !within)
        return within.error();
    return value;
}

} // namespace crowdtrain::control
