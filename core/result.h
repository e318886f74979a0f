#pragma once

// Errors as values at module boundaries (LevelDB's Status, std::expected's
// shape). Every fallible call that crosses out of a layer returns Result<T>;
// exceptions from libtorch, ZeroMQ or msgpack are converted where they arise.
// Header-only so that every layer can use it without linking the engine.

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace crowdtrain {

// What went wrong, said so that a user can act on it: name the file, the
// field, the limit. `code` is a short stable token for programs and the wire,
// one of the constants of engine/error_codes.h or net/wire/error_codes.h.
struct Error {
    std::string code;
    std::string message;

    static Error make(std::string_view code, std::string message)
    {
        return Error{std::string(code), std::move(message)};
    }
};

template <typename T> class [[nodiscard]] Result {
public:
    Result(T value)
        : m_data(std::move(value))
    { }
    Result(Error error)
        : m_data(std::move(error))
    { }

    bool ok() const { return std::holds_alternative<T>(m_data); }
    explicit operator bool() const { return ok(); }

    T& value() & { return std::get<T>(m_data); }
    const T& value() const& { return std::get<T>(m_data); }
    T&& value() && { return std::get<T>(std::move(m_data)); }
    T* operator->() { return &value(); }
    const T* operator->() const { return &value(); }
    T& operator*() & { return value(); }
    const T& operator*() const& { return value(); }

    const Error& error() const { return std::get<Error>(m_data); }

private:
    std::variant<T, Error> m_data;
};

// Result<void>: success or an Error.
class [[nodiscard]] Status {
public:
    Status() = default;
    Status(Error error)
        : m_error(std::move(error))
    { }
    static Status success() { return Status(); }

    bool ok() const { return !m_error.has_value(); }
    explicit operator bool() const { return ok(); }
    const Error& error() const { return *m_error; }

private:
    std::optional<Error> m_error;
};

} // namespace crowdtrain
