#pragma once

// Applying a published update to theta_v on the volunteer side: the
// coordinator's encoded update (int8, or the sparse codec's update) added to
// the fp32 weights bit-exactly (diloco::applyUpdate, applySparseUpdate),
// then the SHA-256 of the result checked against the published stateSha256
// of theta_{v+1}. A mismatch means this copy is not the coordinator's: fall
// back to the full state. Thread-safe.

#include "core/result.h"
#include "engine/diloco/codec.h"
#include "engine/diloco/sparse_codec.h"
#include "net/wire/messages_session.h"

#include <string>
#include <string_view>
#include <vector>

namespace crowdtrain::volunteer {

// theta + decode(payload), when its SHA-256 is expectedStateSha256. Errors:
// the codec's ("bad_size", "bad_index", "non_finite"), "checksum_mismatch",
// "bad_codec" for a sparse update without a layout.
Result<std::vector<float>> applyPublishedUpdate(const std::vector<float>& theta, diloco::Codec codec,
    std::string_view payload, const std::string& expectedStateSha256, const diloco::SparseLayout* sparse = nullptr);

// The same on theta itself, with no copy: on "checksum_mismatch" theta
// holds the update applied (not the coordinator's: the caller drops it); on
// the codec's errors it is untouched.
Status applyPublishedUpdateInPlace(std::vector<float>& theta, diloco::Codec codec, std::string_view payload,
    const std::string& expectedStateSha256, const diloco::SparseLayout* sparse = nullptr);

// The sparse codec's layout of a project, from its join reply's manifest
// and `sparse` settings. "bad_codec" when the reply has no settings.
Result<diloco::SparseLayout> sparseLayoutOf(const net::JoinReply& join);

} // namespace crowdtrain::volunteer
