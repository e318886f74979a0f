#include "engine/parallel/mesh.h"

#include "engine/error_codes.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef CROWDTRAIN_WITH_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#ifdef CROWDTRAIN_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace crowdtrain::engine::parallel {
namespace {

GroupPtr makeGroup(const MeshOptions& options, const c10::intrusive_ptr<c10d::Store>& store, int rank, int size)
{
#ifdef CROWDTRAIN_WITH_NCCL
    if (options.device.is_cuda()) {
        auto ncclOptions = c10d::ProcessGroupNCCL::Options::create();
        ncclOptions->timeout = options.timeout; // the watchdog's and a blocking wait's limit
        return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, ncclOptions);
    }
#endif
#ifdef CROWDTRAIN_WITH_GLOO
    if (options.device.is_cpu()) {
        auto glooOptions = c10d::ProcessGroupGloo::Options::create(options.timeout);
        glooOptions->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(options.host));
        return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, glooOptions);
    }
#endif
    (void)options;
    (void)store;
    (void)rank;
    (void)size;
    return {};
}

} // namespace

std::shared_ptr<Mesh> Mesh::single()
{
    std::shared_ptr<Mesh> mesh(new Mesh());
    mesh->m_world = std::make_unique<Comm>(GroupPtr(), 0, 1);
    mesh->m_dp = std::make_unique<Comm>(GroupPtr(), 0, 1);
    mesh->m_tp = std::make_unique<Comm>(GroupPtr(), 0, 1);
    mesh->m_tie = std::make_unique<Comm>(GroupPtr(), 0, 1);
    return mesh;
}

Result<std::shared_ptr<Mesh>> Mesh::create(const MeshOptions& o)
{
    const int tp = o.tensorParallel, pp = o.pipelineParallel;
    if (o.worldSize < 1 || o.rank < 0 || o.rank >= o.worldSize)
        return Error::make(errc::kBadOptions,
            "rank " + std::to_string(o.rank) + " is outside world size " + std::to_string(o.worldSize));
    if (tp < 1 || pp < 1 || o.worldSize % (tp * pp) != 0)
        return Error::make(errc::kBadOptions,
            "world size " + std::to_string(o.worldSize) + " is not a multiple of tensor-parallel " + std::to_string(tp)
                + " x pipeline-parallel " + std::to_string(pp));
    if (o.worldSize == 1)
        return single();
    const int dp = o.worldSize / (tp * pp);
    const int stage = o.rank / (dp * tp), dpIndex = (o.rank / tp) % dp, tpIndex = o.rank % tp;
    std::shared_ptr<Mesh> mesh(new Mesh());
    mesh->m_stage = stage;
    mesh->m_stages = pp;
    try {
        if (o.store) {
            mesh->m_store = o.store;
        } else {
            c10d::TCPStoreOptions storeOptions;
            storeOptions.port = o.port;
            storeOptions.isServer = o.rank == 0;
            storeOptions.numWorkers = std::size_t(o.worldSize);
            storeOptions.timeout = o.timeout;
            mesh->m_store = c10::make_intrusive<c10d::TCPStore>(o.host, storeOptions);
        }
        auto group = [&](const std::string& name, int rank, int size) {
            if (size == 1)
                return std::make_unique<Comm>(GroupPtr(), 0, 1, o.device, o.broken);
            auto store = c10::make_intrusive<c10d::PrefixStore>(name, mesh->m_store);
            auto made = makeGroup(o, store, rank, size);
            if (!made)
                throw std::runtime_error("no process-group backend for " + o.device.str() + " in this build");
            return std::make_unique<Comm>(made, rank, size, o.device, o.broken);
        };
        mesh->m_world = group("world/", o.rank, o.worldSize);
        mesh->m_tp = group("tp/" + std::to_string(stage * dp + dpIndex) + "/", tpIndex, tp);
        mesh->m_dp = group("dp/" + std::to_string(stage * tp + tpIndex) + "/", dpIndex, dp);
        const bool tieMember = stage == 0 || stage == pp - 1;
        if (pp > 1 && tieMember)
            mesh->m_tie = group("tie/" + std::to_string(dpIndex * tp + tpIndex) + "/", stage == 0 ? 0 : 1, 2);
        else
            mesh->m_tie = std::make_unique<Comm>(GroupPtr(), 0, 1, o.device);
    } catch (const std::exception& e) {
        return Error::make(errc::kRendezvousFailed, std::string("cannot join the process groups: ") + e.what());
    }
    return mesh;
}

int Mesh::rankAtStage(int stage) const
{
    const int perStage = worldSize() / m_stages;
    return stage * perStage + rank() % perStage;
}

int64_t Mesh::bytesSent() const
{
    // The groups' traffic together: each collective goes through one group.
    return m_world->bytesSent() + m_dp->bytesSent() + m_tp->bytesSent() + m_tie->bytesSent();
}

} // namespace crowdtrain::engine::parallel
