#pragma once

// The ranks of a parallel run laid out as pipeline stages x data-parallel
// replicas x tensor-parallel shards (tensor-parallel neighbours adjacent:
// rank = (stage * dp + dpIndex) * tp + tpIndex), with one c10d group for the
// world and one for each axis this rank sits on. Rank 0 hosts the TCP
// rendezvous store; sub-groups meet on it under prefixes of their own.

#include "core/result.h"
#include "engine/parallel/comm.h"

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <memory>
#include <string>

namespace crowdtrain::engine::parallel {

struct MeshOptions {
    int rank = 0;
    int worldSize = 1;
    int tensorParallel = 1;
    int pipelineParallel = 1; // the data-parallel degree is what remains
    std::string host = "127.0.0.1";
    uint16_t port = 29500;
    torch::Device device = torch::kCPU; // CUDA: NCCL, one GPU per rank
    std::chrono::milliseconds timeout{120000}; // a collective's longest wait, Gloo and NCCL alike
    // Ranks that are threads of one process (device_team.h) share a store
    // (a c10d::HashStore) instead of the TCP store at host:port; the Gloo
    // transport still runs over `host`.
    c10::intrusive_ptr<c10d::Store> store{};
    // Shared by the ranks of one process (comm.h): set once a rank fails,
    // so the others leave their collectives instead of waiting for it.
    BrokenFlag broken{};
};

class Mesh {
public:
    // Blocks until every rank has joined every group it belongs to.
    static Result<std::shared_ptr<Mesh>> create(const MeshOptions& options);
    // One rank, no communication.
    static std::shared_ptr<Mesh> single();

    int rank() const { return m_world->rank(); }
    int worldSize() const { return m_world->size(); }
    int stage() const { return m_stage; }
    int stages() const { return m_stages; }
    Comm& world() { return *m_world; }
    Comm& dp() { return *m_dp; }
    Comm& tp() { return *m_tp; }
    // Stage 0 and the last stage of this rank's pipeline (they both hold the
    // tied token embedding); a group of one where there is one stage.
    Comm& tie() { return *m_tie; }
    // Rank in the world of the same (dp, tp) position at another stage.
    int rankAtStage(int stage) const;
    int64_t bytesSent() const;

private:
    Mesh() = default;
    std::unique_ptr<Comm> m_world, m_dp, m_tp, m_tie;
    c10::intrusive_ptr<c10d::Store> m_store;
    int m_stage = 0;
    int m_stages = 1;
};

} // namespace crowdtrain::engine::parallel
