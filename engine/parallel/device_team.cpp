#include "engine/parallel/device_team.h"

#include "engine/error_codes.h"
#include "engine/hf_gpt2.h"
#include "engine/parallel/parallel_trainer.h"
#include "engine/thread_team.h"

#include <ATen/Parallel.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <cstring>
#include <deque>
#include <mutex>

namespace crowdtrain::engine::parallel {

// One source read by every rank: the first rank to ask for batch k draws it
// and keeps it until every rank has taken it, so all ranks see the same
// global batches in the same order. Ranks move together (a step draws the
// same count on each), so the cache holds a step's batches at most.
class SharedBatches {
public:
    SharedBatches(std::unique_ptr<BatchSource> source, int ranks)
        : m_next(std::size_t(ranks))
    {
        reset(std::move(source));
    }

    // Between steps only: no rank is drawing.
    void reset(std::unique_ptr<BatchSource> source)
    {
        std::lock_guard lock(m_mutex);
        m_source = std::move(source);
        m_cache.clear();
        m_first = m_source->position();
        std::fill(m_next.begin(), m_next.end(), m_first);
    }

    void next(int rank, int64_t batch, int64_t* x, int64_t* y)
    {
        std::lock_guard lock(m_mutex);
        uint64_t& at = m_next[std::size_t(rank)];
        const std::size_t elements = std::size_t(batch * m_source->blockSize());
        while (m_first + m_cache.size() <= at) {
            Batch drawn{std::vector<int64_t>(elements), std::vector<int64_t>(elements)};
            m_source->next(batch, drawn.x.data(), drawn.y.data());
            m_cache.push_back(std::move(drawn));
        }
        const Batch& b = m_cache[std::size_t(at - m_first)];
        if (b.x.size() != elements)
            throw std::logic_error("the ranks asked for batches of different sizes");
        std::memcpy(x, b.x.data(), elements * sizeof(int64_t));
        std::memcpy(y, b.y.data(), elements * sizeof(int64_t));
        ++at;
        const uint64_t slowest = *std::min_element(m_next.begin(), m_next.end());
        while (!m_cache.empty() && m_first < slowest) {
            m_cache.pop_front();
            ++m_first;
        }
    }

    uint64_t position(int rank) const
    {
        std::lock_guard lock(m_mutex);
        return m_next[std::size_t(rank)];
    }
    // Every rank alike, between steps (a checkpoint's resume).
    void setPosition(int rank, uint64_t position)
    {
        std::lock_guard lock(m_mutex);
        if (position < m_first || position > m_first + m_cache.size()) {
            m_cache.clear();
            m_source->setPosition(position);
            m_first = position;
        }
        m_next[std::size_t(rank)] = position;
    }
    int64_t blockSize() const
    {
        std::lock_guard lock(m_mutex);
        return m_source->blockSize();
    }

private:
    struct Batch {
        std::vector<int64_t> x, y;
    };
    mutable std::mutex m_mutex;
    std::unique_ptr<BatchSource> m_source;
    std::deque<Batch> m_cache;
    uint64_t m_first = 0; // the source's position of m_cache.front()
    std::vector<uint64_t> m_next; // each rank's next batch
};

namespace {

// A rank's view of the shared source.
class RankSource : public BatchSource {
public:
    RankSource(SharedBatches& shared, int rank)
        : m_shared(shared)
        , m_rank(rank)
    { }
    void next(int64_t batch, int64_t* x, int64_t* y) override { m_shared.next(m_rank, batch, x, y); }
    uint64_t position() const override { return m_shared.position(m_rank); }
    void setPosition(uint64_t p) override { m_shared.setPosition(m_rank, p); }
    int64_t blockSize() const override { return m_shared.blockSize(); }

private:
    SharedBatches& m_shared;
    int m_rank;
};

} // namespace

Result<std::unique_ptr<DeviceTeam>> DeviceTeam::create(
    TrainOptions options, DeviceTeamOptions team, std::unique_ptr<BatchSource> source)
{
    const int ranks = int(team.devices.size());
    if (ranks < 2)
        return Error::make(errc::kBadOptions, "a device team needs two devices or more");
    if (team.zeroStage < 0 || team.zeroStage > 3)
        return Error::make(errc::kBadOptions, "ZeRO stage " + std::to_string(team.zeroStage) + " is not 0 to 3");
    if (!source)
        return Error::make(errc::kBadOptions, "no training data");
    for (const std::string& name : team.devices)
        if (auto device = resolveDevice(name); !device)
            return device.error();
    int64_t parameters = 0;
    for (const auto& [name, shape] : gptParameterShapes(options.model))
        parameters += c10::multiply_integers(shape);

    std::unique_ptr<DeviceTeam> made(new DeviceTeam(team, parameters));
    made->m_batches = std::make_unique<SharedBatches>(std::move(source), ranks);
    made->m_trainers.resize(std::size_t(ranks));
    auto store = c10::make_intrusive<c10d::HashStore>();
    store->setTimeout(team.timeout);
    std::vector<std::optional<Error>> failures(static_cast<std::size_t>(ranks));
    made->onEveryRank([&](int rank) {
        MeshOptions mesh;
        mesh.rank = rank;
        mesh.worldSize = ranks;
        mesh.device = torch::Device(team.devices[std::size_t(rank)]);
        mesh.timeout = team.timeout;
        mesh.store = store;
        mesh.broken = made->m_broken;
        auto joined = Mesh::create(mesh);
        if (!joined) {
            failures[std::size_t(rank)] = joined.error();
            return;
        }
        TrainOptions own = options;
        own.device = team.devices[std::size_t(rank)];
        TrainData data;
        data.train = std::make_unique<RankSource>(*made->m_batches, rank);
        ParallelOptions parallel;
        parallel.zeroStage = team.zeroStage;
        parallel.bf16 = team.bf16Autocast && mesh.device.is_cuda();
        parallel.activationCheckpointing = team.activationCheckpointing;
        auto trainer = ParallelTrainer::create(own, parallel, std::move(data), *joined);
        if (!trainer)
            failures[std::size_t(rank)] = trainer.error();
        else
            made->m_trainers[std::size_t(rank)] = std::move(*trainer);
    });
    for (const auto& failure : failures)
        if (failure)
            return *failure;
    return made;
}

DeviceTeam::DeviceTeam(DeviceTeamOptions options, int64_t parameters)
    : m_options(std::move(options))
    , m_parameters(parameters)
    , m_threads(std::make_unique<ThreadTeam>(int(m_options.devices.size()),
          [threads = std::max(1, m_options.threadsPerRank)](int) { at::set_num_threads(threads); }))
{ }

DeviceTeam::~DeviceTeam()
{
    // Each rank's trainer and process group go on its own thread, broken or not.
    if (m_threads)
        m_threads->run([this](int rank) { m_trainers[std::size_t(rank)].reset(); });
}

void DeviceTeam::onEveryRank(const std::function<void(int rank)>& work)
{
    if (m_broken->load())
        throw TeamBroken();
    m_threads->run([&](int rank) {
        try {
            work(rank);
        } catch (...) {
            m_broken->store(true); // the peers stop waiting for this rank
            throw;
        }
    });
}

bool DeviceTeam::broken() const
{
    return m_broken->load();
}

void DeviceTeam::setSource(std::unique_ptr<BatchSource> source)
{
    m_batches->reset(std::move(source));
}

Status DeviceTeam::assign(const float* flat, int64_t n)
{
    if (n != m_parameters)
        return Error::make(errc::kBadSize,
            "the flat vector holds " + std::to_string(n) + " values, the model " + std::to_string(m_parameters));
    std::map<std::string, torch::Tensor> whole;
    int64_t offset = 0;
    for (const auto& [name, shape] : gptParameterShapes(m_trainers.front()->options().model)) {
        // Read only: each rank copies the values onto its device.
        whole[name] = torch::from_blob(const_cast<float*>(flat + offset), shape, torch::kFloat);
        offset += c10::multiply_integers(shape);
    }
    std::vector<Status> assigned(m_trainers.size(), Status::success());
    onEveryRank(
        [&](int rank) { assigned[std::size_t(rank)] = m_trainers[std::size_t(rank)]->assignParameters(whole); });
    for (const Status& s : assigned)
        if (!s)
            return s;
    return Status::success();
}

StepReport DeviceTeam::step(double learningRate)
{
    std::vector<ParallelStepReport> reports(m_trainers.size());
    onEveryRank([&](int rank) { reports[std::size_t(rank)] = m_trainers[std::size_t(rank)]->step(learningRate); });
    return reports.front().common(m_trainers.front()->tokensSeen());
}

std::vector<float> DeviceTeam::flatten()
{
    NamedParameters whole;
    onEveryRank([&](int rank) {
        auto mine = m_trainers[std::size_t(rank)]->wholeParameters();
        if (rank == 0)
            whole = std::move(mine);
    });
    std::vector<float> flat;
    flat.reserve(std::size_t(m_parameters));
    for (const auto& [name, tensor] : whole) {
        const torch::Tensor t = tensor.to(torch::kCPU, torch::kFloat).contiguous();
        flat.insert(flat.end(), t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
    }
    return flat;
}

int64_t DeviceTeam::stepCount() const
{
    return m_trainers.front()->stepCount();
}

int64_t DeviceTeam::peakStateBytes() const
{
    int64_t peak = 0;
    for (const auto& trainer : m_trainers)
        peak = std::max(peak, trainer->memory().peak());
    return peak;
}

} // namespace crowdtrain::engine::parallel
