#pragma once

// Text that must reach a peer or a JSON reader as valid UTF-8 whatever it
// held (error messages, log output). Pure function, thread-safe.

#include <cstddef>
#include <string>
#include <string_view>

namespace crowdtrain::control {

// `text` with every byte that is not part of a valid UTF-8 sequence
// replaced by U+FFFD, cut at a character boundary to at most `maxBytes`.
std::string toValidUtf8(std::string_view text, std::size_t maxBytes = std::string_view::npos);

} // namespace crowdtrain::control
