#pragma once

// ZeRO (Rajbhandari et al. 2020) over a data-parallel group, on the flat
// parameter layout: each unit (the embeddings + final LayerNorm, then one
// unit per transformer block) is one flat fp32 vector, padded to a multiple
// of the group size, whose parameters are views into it (the order and
// row-major packing of engine/diloco/flat_params.h, unit by unit). Rank r of
// n owns slice r of every unit, and AdamW runs on owned slices only:
//   stage 0  plain data parallel: full parameters, gradients and moments,
//            gradients all-reduced;
//   stage 1  moments sharded: full gradients reduce-scattered at the end of
//            the step, updated slices all-gathered into the parameters;
//   stage 2  gradients sharded too: each unit's gradients live only from its
//            backward to its reduce-scatter, the rank keeps its slice;
//   stage 3  parameters sharded too: a unit's parameters are all-gathered
//            before its forward and its backward and freed after (their
//            storage is released, so tensors autograd saved from them come
//            back with the same values at the re-gather).
// The element-wise AdamW is libtorch's, segment by segment, so a stage and
// a rank count change only the order of the gradient sums. Used from one
// thread; every call is collective over the group unless it says not.

#include "engine/parallel/comm.h"
#include "engine/parallel/memory_meter.h"

#include <string>
#include <vector>

namespace crowdtrain::engine::parallel {

struct ParamInfo {
    std::string name; // the full model's name (wte.weight, h.0.attn.c_attn.weight, ...)
    torch::Tensor param; // a leaf of the model; becomes a view into its unit
    double weightDecay = 0;
    // This copy's share in the global gradient norm: 1 / (ranks outside
    // the data-parallel group holding the same values).
    double normWeight = 1;
};

struct AdamWSettings {
    double beta1 = 0.9;
    double beta2 = 0.95;
    double eps = 1e-8;
};

class ZeroOptimizer {
public:
    enum class State { Parameters, ExpAvg, ExpAvgSq, Gradients }; // gradients: once reduced

    // units[0] holds the parameters used at both ends of the model; it is
    // gathered for the whole micro-batch. Not collective.
    ZeroOptimizer(
        int stage, Comm& dp, std::vector<std::vector<ParamInfo>> units, AdamWSettings adamW, MemoryMeter& meter);
    int stage() const { return m_stage; }
    std::size_t unitCount() const { return m_units.size(); }

    void zeroGrad(); // not collective
    void gather(std::size_t unit); // stage 3; otherwise nothing
    void release(std::size_t unit); // stage 3; not collective
    void beginBackward(std::size_t unit); // stages 2-3: a gradient buffer for the unit; not collective
    void endBackward(std::size_t unit); // stages 2-3: reduce-scatter it into this rank's slice
    // After the step's last backward: stage 0 all-reduces the gradients,
    // stage 1 reduce-scatters them; all stages average over the group.
    // Returns this rank's weighted sum of squared gradient elements (the
    // caller sums it over the world).
    double reduceGradients();
    // AdamW on this rank's slices with the gradients times gradScale, then
    // (stages 1-2) the updated slices all-gathered into the parameters.
    void step(double learningRate, double gradScale);
    int64_t stepCount() const { return m_steps; }

    // The whole parameters, moments or reduced gradients by name (collective).
    std::vector<std::pair<std::string, torch::Tensor>> fullTensors(State which);
    // Takes whole tensors by name for every parameter (moments may be
    // empty: zeros); the caller checked names and shapes. Not collective.
    void load(const std::map<std::string, torch::Tensor>& parameters,
        const std::map<std::string, torch::Tensor>& expAvg, const std::map<std::string, torch::Tensor>& expAvgSq,
        int64_t steps);
    // Takes whole parameter values by name, keeping the moments and the
    // step count (a new starting point, as DiLoCo's theta_v). Not collective.
    void assignParameters(const std::map<std::string, torch::Tensor>& parameters);

private:
    struct Unit {
        std::vector<ParamInfo> params;
        std::vector<int64_t> offsets;
        int64_t numel = 0, padded = 0, shard = 0;
        torch::Tensor full; // stage 3: storage freed while not gathered
        bool gathered = true;
        torch::Tensor master; // stage 3: this rank's slice of the values
        torch::Tensor fullGrad; // stages 0-1
        torch::Tensor gradBuffer; // stages 2-3, during the unit's backward
        torch::Tensor shardGrad; // stages 2-3
        torch::Tensor expAvg, expAvgSq;
    };
    int64_t regionBegin(const Unit& u) const;
    int64_t regionSize(const Unit& u) const;
    torch::Tensor regionValues(Unit& u);
    torch::Tensor regionGrad(Unit& u);
    torch::Tensor flatOf(const Unit& u, const std::map<std::string, torch::Tensor>& named) const;

    int m_stage;
    Comm& m_dp;
    std::vector<Unit> m_units;
    AdamWSettings m_adamW;
    MemoryMeter& m_meter;
    int64_t m_steps = 0;
};

} // namespace crowdtrain::engine::parallel
