#include "engine/data_parallel.h"

#include "engine/error_codes.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/version.h>
#ifdef CROWDTRAIN_WITH_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#ifdef CROWDTRAIN_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace crowdtrain::engine {

namespace {

#if TORCH_VERSION_MAJOR >= 2
using Group = c10::intrusive_ptr<c10d::Backend>; // Gloo and NCCL are Backends since 2.0
#else
using Group = c10::intrusive_ptr<c10d::ProcessGroup>;
#endif

bool backendBuiltIn(const std::string& name)
{
#ifdef CROWDTRAIN_WITH_GLOO
    if (name == "gloo")
        return true;
#endif
#ifdef CROWDTRAIN_WITH_NCCL
    if (name == "nccl")
        return true;
#endif
    return false;
}

// The process group of a backend that backendBuiltIn() accepted.
Group makeGroup(const DataParallelOptions& options, const c10::intrusive_ptr<c10d::Store>& store)
{
#ifdef CROWDTRAIN_WITH_GLOO
    if (options.backend == "gloo") {
        auto glooOptions = c10d::ProcessGroupGloo::Options::create(options.timeout);
        glooOptions->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(options.host));
        return c10::make_intrusive<c10d::ProcessGroupGloo>(store, options.rank, options.worldSize, glooOptions);
    }
#endif
#ifdef CROWDTRAIN_WITH_NCCL
    if (options.backend == "nccl")
        return c10::make_intrusive<c10d::ProcessGroupNCCL>(
            store, options.rank, options.worldSize, c10d::ProcessGroupNCCL::Options::create());
#endif
    (void)options;
    (void)store;
    return {};
}

} // namespace

struct DataParallel::Impl {
    torch::Device device = torch::kCPU;
    c10::intrusive_ptr<c10d::Store> store;
    Group group;
};

Result<std::shared_ptr<DataParallel>> DataParallel::create(const DataParallelOptions& options)
{
    if (options.worldSize < 1 || options.rank < 0 || options.rank >= options.worldSize)
        return Error::make(errc::kBadOptions,
            "rank " + std::to_string(options.rank) + " is outside world size " + std::to_string(options.worldSize));
    if (!backendBuiltIn(options.backend))
        return Error::make(errc::kBadOptions, "process-group backend '" + options.backend + "' is not in this build");
    if (options.backend == "nccl" && !options.device.is_cuda())
        return Error::make(errc::kBadOptions, "NCCL reduces CUDA tensors only, not " + options.device.str());
    try {
        auto impl = std::make_unique<Impl>();
        impl->device = options.device;
        c10d::TCPStoreOptions storeOptions;
        storeOptions.port = options.port;
        storeOptions.isServer = options.rank == 0;
        storeOptions.numWorkers = std::size_t(options.worldSize);
        storeOptions.timeout = options.timeout;
        impl->store = c10::make_intrusive<c10d::TCPStore>(options.host, storeOptions);
        impl->group = makeGroup(options, impl->store);
        return std::shared_ptr<DataParallel>(new DataParallel(options.rank, options.worldSize, std::move(impl)));
    } catch (const std::exception& e) {
        return Error::make(errc::kRendezvousFailed, std::string("cannot join the process group: ") + e.what());
    }
}

DataParallel::DataParallel(int rank, int worldSize, std::unique_ptr<Impl> impl)
    : m_rank(rank)
    , m_worldSize(worldSize)
    , m_impl(std::move(impl))
{ }

DataParallel::~DataParallel() = default;

void DataParallel::averageGradients(const std::vector<torch::Tensor>& parameters)
{
    // One bucket: a single all-reduce beats one per tensor for small models.
    std::vector<torch::Tensor> grads;
    for (const auto& p : parameters)
        grads.push_back(p.grad().defined() ? p.grad().reshape({-1}) : torch::zeros({p.numel()}, p.options()));
    std::vector<torch::Tensor> flat{torch::cat(grads)};
    m_impl->group->allreduce(flat)->wait();
    flat[0].div_(double(m_worldSize));
    int64_t offset = 0;
    for (const auto& p : parameters) {
        const int64_t n = p.numel();
        if (p.grad().defined())
            p.mutable_grad().copy_(flat[0].slice(0, offset, offset + n).view_as(p));
        offset += n;
    }
}

double DataParallel::averageScalar(double value)
{
    std::vector<torch::Tensor> buffer{torch::full({1}, value, torch::dtype(torch::kDouble).device(m_impl->device))};
    m_impl->group->allreduce(buffer)->wait();
    return buffer[0].item<double>() / double(m_worldSize);
}

void DataParallel::broadcastParameters(const std::vector<torch::Tensor>& parameters)
{
    torch::NoGradGuard noGrad;
    for (const auto& p : parameters) {
        std::vector<torch::Tensor> buffer{p.detach()};
        m_impl->group->broadcast(buffer)->wait();
    }
}

void DataParallel::barrier()
{
    m_impl->group->barrier()->wait();
}

} // namespace crowdtrain::engine
