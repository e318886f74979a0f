#include "net/volunteer/theta_update.h"

#include "net/volunteer/local_store.h"
#include "net/wire/error_codes.h"

namespace crowdtrain::volunteer {

Result<std::vector<float>> applyPublishedUpdate(const std::vector<float>& theta, diloco::Codec codec,
    std::string_view payload, const std::string& expectedStateSha256)
{
    std::vector<float> next = theta;
    if (Status applied = diloco::applyUpdate(codec, payload, int64_t(next.size()), next.data()); !applied)
        return applied.error();
    if (floatsSha256(next) != expectedStateSha256)
        return Error::make(net::errc::kChecksumMismatch, "theta after the update does not match the published SHA-256");
    return next;
}

} // namespace crowdtrain::volunteer
