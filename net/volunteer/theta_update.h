#pragma once

// Applying a published update to theta_v on the volunteer side: the
// coordinator's encoded update (int8 in protocol version 1) added to the
// fp32 weights with diloco::applyUpdate (bit-exact), then the SHA-256 of the
// result checked against the published stateSha256 of theta_{v+1}. A
// mismatch means this copy is not the coordinator's: fall back to the full
// state. Thread-safe.

#include "engine/diloco/codec.h"
#include "engine/result.h"

#include <string>
#include <string_view>
#include <vector>

namespace crowdtrain::volunteer {

// theta + decode(payload), when its SHA-256 is expectedStateSha256. Errors:
// the codec's ("bad_size", "non_finite"), "checksum_mismatch".
Result<std::vector<float>> applyPublishedUpdate(const std::vector<float>& theta, diloco::Codec codec,
    std::string_view payload, const std::string& expectedStateSha256);

} // namespace crowdtrain::volunteer
