#include "net/volunteer/theta_update.h"

#include "net/volunteer/local_store.h"
#include "net/wire/error_codes.h"

namespace crowdtrain::volunteer {

Result<std::vector<float>> applyPublishedUpdate(const std::vector<float>& theta, diloco::Codec codec,
    std::string_view payload, const std::string& expectedStateSha256, const diloco::SparseLayout* sparse)
{
    std::vector<float> next = theta;
    if (Status applied = applyPublishedUpdateInPlace(next, codec, payload, expectedStateSha256, sparse); !applied)
        return applied.error();
    return next;
}

Status applyPublishedUpdateInPlace(std::vector<float>& theta, diloco::Codec codec, std::string_view payload,
    const std::string& expectedStateSha256, const diloco::SparseLayout* sparse)
{
    if (codec == diloco::Codec::Sparse) {
        if (!sparse || sparse->elements() != int64_t(theta.size()))
            return Error::make(net::errc::kBadCodec, "a sparse update needs the project's sparse layout");
        if (Status applied = diloco::applySparseUpdate(*sparse, payload, theta.data()); !applied)
            return applied;
    } else if (Status applied = diloco::applyUpdate(codec, payload, int64_t(theta.size()), theta.data()); !applied) {
        return applied;
    }
    if (floatsSha256(theta) != expectedStateSha256)
        return Error::make(net::errc::kChecksumMismatch, "theta after the update does not match the published SHA-256");
    return Status::success();
}

Result<diloco::SparseLayout> sparseLayoutOf(const net::JoinReply& join)
{
    if (!join.sparse)
        return Error::make(net::errc::kBadCodec, "the project's codec is sparse but its join reply has no settings");
    std::vector<int64_t> sizes;
    for (const net::TensorSpec& tensor : join.manifest) {
        int64_t n = 1;
        for (const uint64_t d : tensor.shape)
            n *= int64_t(d);
        sizes.push_back(n);
    }
    const diloco::SparseOptions options{
        int64_t(join.sparse->chunk), int64_t(join.sparse->k), join.sparse->decay, int(join.sparse->updateBits)};
    return diloco::SparseLayout::make(std::move(sizes), options);
}

} // namespace crowdtrain::volunteer
