#pragma once

// Where a training loop gets its token windows. The data pipeline's
// BatchSampler implements it; so can any other stream (a coordinator-assigned
// shard range). Implementations need not be thread-safe.

#include <cstdint>

namespace crowdtrain::engine {

class BatchSource {
public:
    virtual ~BatchSource() = default;

    // Fills x and y (each batch * blockSize int64, row-major); y is x shifted
    // by one token.
    virtual void next(int64_t batch, int64_t* x, int64_t* y) = 0;
    // Batches drawn so far; with the source's seed it fixes the stream.
    virtual uint64_t position() const = 0;
    virtual void setPosition(uint64_t batchesDrawn) = 0;
    virtual int64_t blockSize() const = 0;
};

} // namespace crowdtrain::engine
