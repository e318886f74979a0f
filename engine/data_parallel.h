#pragma once

// Synchronous data parallel across local processes (a machine's GPUs, or CPU
// processes in tests) through libtorch's c10d process groups: Gloo on CPU,
// NCCL on CUDA builds. Rank 0 hosts the rendezvous store. Used from the
// training thread only.

#include "core/result.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <torch/torch.h>

namespace crowdtrain::engine {

struct DataParallelOptions {
    int rank = 0;
    int worldSize = 1;
    std::string host = "127.0.0.1";
    uint16_t port = 29500;
    std::string backend = "gloo"; // "gloo" or "nccl", where the build has it
    // Where this rank's tensors live: the CPU for Gloo, this rank's own GPU
    // for NCCL (NCCL reduces device memory only, one GPU per rank).
    torch::Device device = torch::kCPU;
    std::chrono::milliseconds timeout{120000};
};

class DataParallel {
public:
    // Blocks until every rank has joined (or the timeout passes).
    static Result<std::shared_ptr<DataParallel>> create(const DataParallelOptions& options);
    ~DataParallel();

    int rank() const { return m_rank; }
    int worldSize() const { return m_worldSize; }

    // Averages the parameters' gradients across ranks in one flat all-reduce.
    void averageGradients(const std::vector<torch::Tensor>& parameters);
    double averageScalar(double value);
    // Copies rank 0's values into every rank's tensors.
    void broadcastParameters(const std::vector<torch::Tensor>& parameters);
    void barrier();

private:
    struct Impl;
    DataParallel(int rank, int worldSize, std::unique_ptr<Impl> impl);

    int m_rank;
    int m_worldSize;
    std::unique_ptr<Impl> m_impl;
};

} // namespace crowdtrain::engine
