#pragma once

// Uniform random token ids from a fixed generator, for benchmarks whose cost
// does not depend on the tokens (a training step's).

#include "engine/batch_source.h"

#include <random>

namespace crowdtrain::bench {

class RandomTokens : public engine::BatchSource {
public:
    RandomTokens(int64_t blockSize, int64_t vocab)
        : m_blockSize(blockSize)
        , m_vocab(vocab)
    { }
    void next(int64_t batch, int64_t* x, int64_t* y) override
    {
        std::uniform_int_distribution<int64_t> id(0, m_vocab - 1);
        for (int64_t i = 0; i < batch * m_blockSize; ++i) {
            x[i] = id(m_rng);
            y[i] = id(m_rng);
        }
        ++m_position;
    }
    uint64_t position() const override { return m_position; }
    void setPosition(uint64_t p) override { m_position = p; }
    int64_t blockSize() const override { return m_blockSize; }

private:
    int64_t m_blockSize;
    int64_t m_vocab;
    uint64_t m_position = 0;
    std::mt19937_64 m_rng{42};
};

} // namespace crowdtrain::bench
