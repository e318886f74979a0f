#pragma once

// One c10d process group (Gloo on CPU, NCCL on CUDA) with the collectives the
// parallel modes use, and a count of the bytes this rank sends through it.
// Debian's libtorch 1.13 Gloo has no reduce_scatter and no flat
// (_base) all-gather: reduce-scatter is an all-reduce of the whole buffer
// keeping this rank's slice (2(n-1)/n of the bytes instead of (n-1)/n), and
// the flat all-gather is the list all-gather over views of the output.
// A group of one rank does no communication. Used from one thread.
//
// The ranks of a team may share a "broken" flag (MeshOptions::broken): once
// a rank has failed it is set, every later collective throws TeamBroken at
// once, and a CPU (Gloo) rank waiting inside one stops waiting within a
// millisecond or so, so no rank waits for a peer that is gone.

#include <atomic>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/torch.h>
#include <torch/version.h>

namespace crowdtrain::engine::parallel {

#if TORCH_VERSION_MAJOR >= 2
using GroupPtr = c10::intrusive_ptr<c10d::Backend>;
#else
using GroupPtr = c10::intrusive_ptr<c10d::ProcessGroup>;
#endif

using BrokenFlag = std::shared_ptr<std::atomic<bool>>;

// What a collective throws once a rank of its team has failed.
struct TeamBroken : std::runtime_error {
    TeamBroken()
        : std::runtime_error("another rank of the team failed; this collective is abandoned")
    { }
};

class Comm {
public:
    // group may be null when size is 1. device: where the group's tensors
    // live (the CPU for Gloo, the rank's GPU for NCCL). broken: the team's
    // flag, or null.
    Comm(GroupPtr group, int rank, int size, torch::Device device = torch::kCPU, BrokenFlag broken = {});

    int rank() const { return m_rank; }
    int size() const { return m_size; }
    torch::Device device() const { return m_device; }

    void allreduceSum(torch::Tensor& t);
    void allreduceMax(torch::Tensor& t);
    double allreduceScalar(double value); // sum over ranks
    // full holds size() * shard.numel() elements; rank r's shard lands at r.
    void allgather(const torch::Tensor& shard, torch::Tensor& full);
    // Sums `full` over ranks (in place: it is the all-reduce's buffer) and
    // returns this rank's slice of full.numel() / size() elements, a view.
    torch::Tensor reduceScatterSum(torch::Tensor& full);
    void broadcast(torch::Tensor& t, int root);

    // Point to point: the send is asynchronous (keep the tensor alive until
    // wait()), the receive blocks.
    c10::intrusive_ptr<c10d::Work> send(torch::Tensor& t, int dst, int tag);
    void recv(torch::Tensor& t, int src, int tag);
    void barrier();

    // Bytes this rank has put on the wire through the group, counted as a
    // ring algorithm sends them: all-reduce 2(n-1)/n of the buffer,
    // all-gather (n-1) shards, broadcast and send the whole tensor.
    int64_t bytesSent() const { return m_bytesSent; }

private:
    // Throws TeamBroken when the team's flag is set.
    void checkTeam() const;
    // Waits for `work`; on the CPU gives up when the team breaks meanwhile.
    void finish(const c10::intrusive_ptr<c10d::Work>& work) const;

    GroupPtr m_group;
    BrokenFlag m_broken;
    int m_rank;
    int m_size;
    torch::Device m_device;
    int64_t m_bytesSent = 0;
};

} // namespace crowdtrain::engine::parallel
