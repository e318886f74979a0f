#include "engine/parallel/zero.h"

#include <cmath>

namespace crowdtrain::engine::parallel {
namespace {

int64_t bytes(int64_t elements)
{
    return elements * int64_t(sizeof(float));
}

// Calls f(param, first element of the overlap in the flat vector, count)
// for each parameter overlapping [begin, end).
template <typename F>
void forOverlaps(
    const std::vector<int64_t>& offsets, const std::vector<ParamInfo>& params, int64_t begin, int64_t end, F&& f)
{
    for (std::size_t i = 0; i < params.size(); ++i) {
        const int64_t from = std::max(begin, offsets[i]);
        const int64_t to = std::min(end, offsets[i] + params[i].param.numel());
        if (from < to)
            f(params[i], from, to - from);
    }
}

} // namespace

ZeroOptimizer::ZeroOptimizer(
    int stage, Comm& dp, std::vector<std::vector<ParamInfo>> units, AdamWSettings adamW, MemoryMeter& meter)
    : m_stage(stage)
    , m_dp(dp)
    , m_adamW(adamW)
    , m_meter(meter)
{
    torch::NoGradGuard noGrad;
    const int n = dp.size();
    for (auto& params : units) {
        Unit u;
        u.params = std::move(params);
        for (const auto& p : u.params) {
            u.offsets.push_back(u.numel);
            u.numel += p.param.numel();
        }
        u.padded = (u.numel + n - 1) / n * n;
        u.shard = u.padded / n;
        const auto options
            = torch::TensorOptions()
                  .dtype(torch::kFloat)
                  .device(u.params.empty() ? torch::Device(torch::kCPU) : u.params.front().param.device());
        u.full = torch::zeros({u.padded}, options);
        for (std::size_t i = 0; i < u.params.size(); ++i) {
            torch::Tensor& p = u.params[i].param;
            auto view = u.full.narrow(0, u.offsets[i], p.numel()).view(p.sizes());
            view.copy_(p);
            p.set_data(view);
        }
        m_meter.add(MemoryMeter::Parameters, bytes(u.padded));
        const int64_t region = stage == 0 ? u.padded : u.shard;
        u.expAvg = torch::zeros({region}, options);
        u.expAvgSq = torch::zeros({region}, options);
        m_meter.add(MemoryMeter::Optimizer, bytes(2 * region));
        if (stage <= 1) {
            u.fullGrad = torch::zeros({u.padded}, options);
            m_meter.add(MemoryMeter::Gradients, bytes(u.padded));
            for (std::size_t i = 0; i < u.params.size(); ++i) {
                torch::Tensor& p = u.params[i].param;
                p.mutable_grad() = u.fullGrad.narrow(0, u.offsets[i], p.numel()).view(p.sizes());
            }
        } else {
            u.shardGrad = torch::zeros({u.shard}, options);
            m_meter.add(MemoryMeter::Gradients, bytes(u.shard));
        }
        m_units.push_back(std::move(u));
        if (stage == 3) {
            // Unit by unit, so that the whole model is never held at once.
            Unit& added = m_units.back();
            added.master = added.full.narrow(0, regionBegin(added), added.shard).clone();
            m_meter.add(MemoryMeter::Parameters, bytes(added.shard));
            release(m_units.size() - 1);
        }
    }
}

int64_t ZeroOptimizer::regionBegin(const Unit& u) const
{
    return m_stage == 0 ? 0 : int64_t(m_dp.rank()) * u.shard;
}

int64_t ZeroOptimizer::regionSize(const Unit& u) const
{
    return m_stage == 0 ? u.padded : u.shard;
}

torch::Tensor ZeroOptimizer::regionValues(Unit& u)
{
    return m_stage == 3 ? u.master : u.full.narrow(0, regionBegin(u), regionSize(u));
}

torch::Tensor ZeroOptimizer::regionGrad(Unit& u)
{
    return m_stage <= 1 ? u.fullGrad.narrow(0, regionBegin(u), regionSize(u)) : u.shardGrad;
}

void ZeroOptimizer::zeroGrad()
{
    for (Unit& u : m_units)
        (m_stage <= 1 ? u.fullGrad : u.shardGrad).zero_();
}

void ZeroOptimizer::gather(std::size_t unit)
{
    Unit& u = m_units[unit];
    if (m_stage < 3 || u.gathered)
        return;
    // New memory under the same storage: the parameters (and whatever
    // autograd saved of them) see it. Written through a tensor of its own
    // so that the parameters' version counters do not move.
    c10::StorageImpl* storage = u.full.storage().unsafeGetStorageImpl();
    const auto n = std::size_t(bytes(u.padded));
    storage->set_data_ptr_noswap(storage->allocator()->allocate(n));
    storage->set_nbytes(n);
    torch::Tensor raw = torch::empty({0}, u.full.options()).set_(u.full.storage(), 0, {u.padded}, {1});
    m_dp.allgather(u.master, raw);
    u.gathered = true;
    m_meter.add(MemoryMeter::Parameters, bytes(u.padded));
}

void ZeroOptimizer::release(std::size_t unit)
{
    Unit& u = m_units[unit];
    if (m_stage < 3 || !u.gathered)
        return;
    u.full.storage().unsafeGetStorageImpl()->reset();
    u.gathered = false;
    m_meter.sub(MemoryMeter::Parameters, bytes(u.padded));
}

void ZeroOptimizer::beginBackward(std::size_t unit)
{
    Unit& u = m_units[unit];
    if (m_stage < 2 || u.gradBuffer.defined())
        return;
    u.gradBuffer = torch::zeros({u.padded}, u.shardGrad.options());
    m_meter.add(MemoryMeter::Gradients, bytes(u.padded));
    for (std::size_t i = 0; i < u.params.size(); ++i) {
        torch::Tensor& p = u.params[i].param;
        p.mutable_grad() = u.gradBuffer.narrow(0, u.offsets[i], p.numel()).view(p.sizes());
    }
}

void ZeroOptimizer::endBackward(std::size_t unit)
{
    Unit& u = m_units[unit];
    if (m_stage < 2 || !u.gradBuffer.defined())
        return;
    torch::NoGradGuard noGrad;
    u.shardGrad.add_(m_dp.reduceScatterSum(u.gradBuffer));
    for (auto& p : u.params)
        p.param.mutable_grad() = torch::Tensor();
    u.gradBuffer = torch::Tensor();
    m_meter.sub(MemoryMeter::Gradients, bytes(u.padded));
}

double ZeroOptimizer::reduceGradients()
{
    torch::NoGradGuard noGrad;
    double squares = 0;
    for (Unit& u : m_units) {
        if (m_stage == 0)
            m_dp.allreduceSum(u.fullGrad);
        else if (m_stage == 1)
            m_dp.reduceScatterSum(u.fullGrad);
        torch::Tensor grad = regionGrad(u);
        grad.div_(double(m_dp.size()));
        const int64_t begin = regionBegin(u);
        // Stage 0: every rank of the group holds the same gradient.
        const double copies = m_stage == 0 ? double(m_dp.size()) : 1.0;
        forOverlaps(u.offsets, u.params, begin, begin + regionSize(u), [&](const ParamInfo& p, int64_t at, int64_t n) {
            const double s = grad.narrow(0, at - begin, n).pow(2).sum().item<double>();
            squares += s * p.normWeight / copies;
        });
    }
    return squares;
}

void ZeroOptimizer::step(double learningRate, double gradScale)
{
    torch::NoGradGuard noGrad;
    ++m_steps;
    const double bias1 = 1 - std::pow(m_adamW.beta1, double(m_steps));
    const double bias2 = 1 - std::pow(m_adamW.beta2, double(m_steps));
    for (Unit& u : m_units) {
        torch::Tensor values = regionValues(u), grads = regionGrad(u);
        const int64_t begin = regionBegin(u);
        if (gradScale != 1.0)
            grads.mul_(gradScale);
        // Segment by segment, as libtorch's AdamW does it per parameter.
        forOverlaps(u.offsets, u.params, begin, begin + regionSize(u), [&](const ParamInfo& p, int64_t at, int64_t n) {
            auto value = values.narrow(0, at - begin, n), grad = grads.narrow(0, at - begin, n);
            auto expAvg = u.expAvg.narrow(0, at - begin, n), expAvgSq = u.expAvgSq.narrow(0, at - begin, n);
            if (p.weightDecay != 0)
                value.mul_(1 - learningRate * p.weightDecay);
            expAvg.mul_(m_adamW.beta1).add_(grad, 1 - m_adamW.beta1);
            expAvgSq.mul_(m_adamW.beta2).addcmul_(grad, grad, 1 - m_adamW.beta2);
            auto denom = (expAvgSq.sqrt() / std::sqrt(bias2)).add_(m_adamW.eps);
            value.addcdiv_(expAvg, denom, -learningRate / bias1);
        });
        if (m_stage == 1 || m_stage == 2)
            m_dp.allgather(values, u.full);
    }
}

std::vector<std::pair<std::string, torch::Tensor>> ZeroOptimizer::fullTensors(State which)
{
    torch::NoGradGuard noGrad;
    std::vector<std::pair<std::string, torch::Tensor>> result;
    for (std::size_t i = 0; i < m_units.size(); ++i) {
        Unit& u = m_units[i];
        torch::Tensor flat;
        if (which == State::Parameters) {
            const bool wasGathered = u.gathered;
            gather(i);
            flat = u.full.clone();
            if (!wasGathered)
                release(i);
        } else {
            const torch::Tensor region = which == State::ExpAvg ? u.expAvg
                : which == State::ExpAvgSq                      ? u.expAvgSq
                                                                : regionGrad(u).contiguous();
            if (m_stage == 0) {
                flat = region.clone();
            } else {
                flat = torch::empty({u.padded}, region.options());
                m_dp.allgather(region, flat);
            }
        }
        for (std::size_t j = 0; j < u.params.size(); ++j) {
            const auto& p = u.params[j];
            result.emplace_back(p.name, flat.narrow(0, u.offsets[j], p.param.numel()).view(p.param.sizes()).clone());
        }
    }
    return result;
}

torch::Tensor ZeroOptimizer::flatOf(const Unit& u, const std::map<std::string, torch::Tensor>& named) const
{
    torch::Tensor flat = torch::zeros({u.padded}, u.shardGrad.defined() ? u.shardGrad.options() : u.fullGrad.options());
    for (std::size_t j = 0; j < u.params.size(); ++j) {
        auto found = named.find(u.params[j].name);
        if (found != named.end())
            flat.narrow(0, u.offsets[j], u.params[j].param.numel()).copy_(found->second.reshape({-1}));
    }
    return flat;
}

void ZeroOptimizer::assignParameters(const std::map<std::string, torch::Tensor>& parameters)
{
    torch::NoGradGuard noGrad;
    for (Unit& u : m_units) {
        const torch::Tensor values = flatOf(u, parameters);
        if (m_stage == 3)
            u.master.copy_(values.narrow(0, regionBegin(u), regionSize(u)));
        if (m_stage < 3 || u.gathered)
            u.full.copy_(values);
    }
}

void ZeroOptimizer::load(const std::map<std::string, torch::Tensor>& parameters,
    const std::map<std::string, torch::Tensor>& expAvg, const std::map<std::string, torch::Tensor>& expAvgSq,
    int64_t steps)
{
    torch::NoGradGuard noGrad;
    assignParameters(parameters);
    for (Unit& u : m_units) {
        const int64_t begin = regionBegin(u), size = regionSize(u);
        u.expAvg.copy_(flatOf(u, expAvg).narrow(0, begin, size));
        u.expAvgSq.copy_(flatOf(u, expAvgSq).narrow(0, begin, size));
    }
    m_steps = steps;
}

} // namespace crowdtrain::engine::parallel
