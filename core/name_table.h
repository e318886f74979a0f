#pragma once

// A vocabulary's one table: an enum's values and their wire words, in the
// enum's order, with lookups both ways. Every side (daemon, agent, app, CLI)
// names a state through such a table and never writes the word again;
// tests/tst_vocabulary.cpp checks each table against docs/protocol.md.
// Header-only, constexpr; thread-safe.

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>
#include <utility>

namespace crowdtrain::core {

template <typename E, std::size_t N> using NameTable = std::array<std::pair<E, std::string_view>, N>;

// The word of `value`; "" when the table lacks it.
template <typename E, std::size_t N> constexpr std::string_view nameIn(const NameTable<E, N>& table, E value)
{
    for (const auto& [e, name] : table)
        if (e == value)
            return name;
    return {};
}

// The value whose word is `name`; nullopt for a word the table lacks.
template <typename E, std::size_t N>
constexpr std::optional<E> parseIn(const NameTable<E, N>& table, std::string_view name)
{
    for (const auto& [e, n] : table)
        if (n == name)
            return e;
    return std::nullopt;
}

// Every value once, every word once (for static_assert).
template <typename E, std::size_t N> constexpr bool isOneToOne(const NameTable<E, N>& table)
{
    for (std::size_t i = 0; i < N; ++i)
        for (std::size_t j = i + 1; j < N; ++j)
            if (table[i].first == table[j].first || table[i].second == table[j].second)
                return false;
    return true;
}

} // namespace crowdtrain::core
