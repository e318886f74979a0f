#include "engine/parallel/comm.h"

#include <chrono>
#include <thread>

namespace crowdtrain::engine::parallel {
namespace {

int64_t bytesOf(const torch::Tensor& t)
{
    return t.numel() * int64_t(t.element_size());
}

} // namespace

Comm::Comm(GroupPtr group, int rank, int size, torch::Device device, BrokenFlag broken)
    : m_group(std::move(group))
    , m_broken(std::move(broken))
    , m_rank(rank)
    , m_size(size)
    , m_device(device)
{ }

void Comm::checkTeam() const
{
    if (m_broken && m_broken->load())
        throw TeamBroken();
}

void Comm::finish(const c10::intrusive_ptr<c10d::Work>& work) const
{
    // NCCL's wait only orders the rank's stream (its timeout is the group's);
    // a CPU rank blocks, so it watches the team meanwhile.
    if (m_broken && m_device.is_cpu()) {
        constexpr auto kPoll = std::chrono::microseconds(200);
        for (int spins = 0; !work->isCompleted(); ++spins) {
            checkTeam();
            if (spins < 64)
                std::this_thread::yield();
            else
                std::this_thread::sleep_for(kPoll);
        }
    }
    work->wait();
}

void Comm::allreduceSum(torch::Tensor& t)
{
    if (m_size == 1 || t.numel() == 0)
        return;
    checkTeam();
    std::vector<torch::Tensor> buffer{t};
    finish(m_group->allreduce(buffer));
    m_bytesSent += 2 * (m_size - 1) * bytesOf(t) / m_size;
}

void Comm::allreduceMax(torch::Tensor& t)
{
    if (m_size == 1)
        return;
    checkTeam();
    std::vector<torch::Tensor> buffer{t};
    c10d::AllreduceOptions options;
    options.reduceOp = c10d::ReduceOp::MAX;
    finish(m_group->allreduce(buffer, options));
    m_bytesSent += 2 * (m_size - 1) * bytesOf(t) / m_size;
}

double Comm::allreduceScalar(double value)
{
    if (m_size == 1)
        return value;
    torch::Tensor t = torch::full({1}, value, torch::TensorOptions().dtype(torch::kDouble).device(m_device));
    allreduceSum(t);
    return t.item<double>();
}

void Comm::allgather(const torch::Tensor& shard, torch::Tensor& full)
{
    TORCH_CHECK(full.numel() == shard.numel() * m_size, "all-gather output of the wrong size");
    if (m_size == 1 || shard.numel() == 0) {
        full.view({-1}).copy_(shard.view({-1}));
        return;
    }
    const int64_t n = shard.numel();
    std::vector<std::vector<torch::Tensor>> outputs(1);
    auto flat = full.view({-1});
    for (int r = 0; r < m_size; ++r)
        outputs[0].push_back(flat.narrow(0, r * n, n));
    std::vector<torch::Tensor> input{shard.contiguous().view({-1})};
    checkTeam();
    finish(m_group->allgather(outputs, input));
    m_bytesSent += (m_size - 1) * bytesOf(shard);
}

torch::Tensor Comm::reduceScatterSum(torch::Tensor& full)
{
    TORCH_CHECK(full.numel() % m_size == 0, "reduce-scatter buffer not divisible by the group size");
    allreduceSum(full);
    const int64_t n = full.numel() / m_size;
    return full.view({-1}).narrow(0, m_rank * n, n);
}

void Comm::broadcast(torch::Tensor& t, int root)
{
    if (m_size == 1)
        return;
    checkTeam();
    std::vector<torch::Tensor> buffer{t};
    c10d::BroadcastOptions options;
    options.rootRank = root;
    finish(m_group->broadcast(buffer, options));
    if (m_rank == root)
        m_bytesSent += bytesOf(t);
}

c10::intrusive_ptr<c10d::Work> Comm::send(torch::Tensor& t, int dst, int tag)
{
    checkTeam();
    std::vector<torch::Tensor> buffer{t};
    m_bytesSent += bytesOf(t);
    return m_group->send(buffer, dst, tag);
}

void Comm::recv(torch::Tensor& t, int src, int tag)
{
    checkTeam();
    std::vector<torch::Tensor> buffer{t};
    finish(m_group->recv(buffer, src, tag));
}

void Comm::barrier()
{
    if (m_size == 1)
        return;
    checkTeam();
    finish(m_group->barrier());
}

} // namespace crowdtrain::engine::parallel
