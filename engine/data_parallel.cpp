#include "engine/data_parallel.h"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef CROWDTRAIN_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace crowdtrain::engine {

struct DataParallel::Impl {
    torch::Device device = torch::kCPU;
    c10::intrusive_ptr<c10d::Store> store;
    c10::intrusive_ptr<c10d::ProcessGroup> group;
};

Result<std::shared_ptr<DataParallel>> DataParallel::create(const DataParallelOptions& options)
{
    if (options.worldSize < 1 || options.rank < 0 || options.rank >= options.worldSize)
        return Error::make("bad_options",
            "rank " + std::to_string(options.rank) + " is outside world size " + std::to_string(options.worldSize));
    if (options.backend == "nccl" && !options.device.is_cuda())
        return Error::make("bad_options", "NCCL reduces CUDA tensors only, not " + options.device.str());
    try {
        auto impl = std::make_unique<Impl>();
        impl->device = options.device;
        c10d::TCPStoreOptions storeOptions;
        storeOptions.port = options.port;
        storeOptions.isServer = options.rank == 0;
        storeOptions.numWorkers = std::size_t(options.worldSize);
        storeOptions.timeout = options.timeout;
        impl->store = c10::make_intrusive<c10d::TCPStore>(options.host, storeOptions);
        if (options.backend == "gloo") {
            auto glooOptions = c10d::ProcessGroupGloo::Options::create(options.timeout);
            glooOptions->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(options.host));
            impl->group = c10::make_intrusive<c10d::ProcessGroupGloo>(
                impl->store, options.rank, options.worldSize, glooOptions);
#ifdef CROWDTRAIN_WITH_NCCL
        } else if (options.backend == "nccl") {
            auto ncclOptions = c10d::ProcessGroupNCCL::Options::create();
            impl->group = c10::make_intrusive<c10d::ProcessGroupNCCL>(
                impl->store, options.rank, options.worldSize, ncclOptions);
#endif
        } else {
            return Error::make("bad_options", "process-group backend '" + options.backend + "' is not available");
        }
        return std::shared_ptr<DataParallel>(new DataParallel(options.rank, options.worldSize, std::move(impl)));
    } catch (const std::exception& e) {
        return Error::make("rendezvous_failed", std::string("cannot join the process group: ") + e.what());
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
