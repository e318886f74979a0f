#include "engine/parallel/pipeline.h"

#include <chrono>

namespace crowdtrain::engine::parallel {
namespace {

class Links {
public:
    Links(Mesh& mesh, std::vector<int64_t> hidden)
        : m_mesh(mesh)
        , m_hidden(std::move(hidden))
        , m_stage(mesh.stage())
    { }
    bool first() const { return m_stage == 0; }
    bool last() const { return m_stage == m_mesh.stages() - 1; }

    torch::Tensor receive(int fromStage, int tag)
    {
        torch::Tensor t
            = torch::empty(m_hidden, torch::TensorOptions().dtype(torch::kFloat).device(m_mesh.world().device()));
        const auto start = std::chrono::steady_clock::now();
        m_mesh.world().recv(t, m_mesh.rankAtStage(fromStage), tag);
        waitMs += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
        return t;
    }
    void send(const torch::Tensor& t, int toStage, int tag)
    {
        torch::Tensor buffer = t.detach().to(torch::kFloat).contiguous();
        m_pending.emplace_back(m_mesh.world().send(buffer, m_mesh.rankAtStage(toStage), tag), buffer);
    }
    void finish()
    {
        for (auto& [work, buffer] : m_pending)
            work->wait();
        m_pending.clear();
    }

    double waitMs = 0;

private:
    Mesh& m_mesh;
    std::vector<int64_t> m_hidden;
    int m_stage;
    std::vector<std::pair<c10::intrusive_ptr<c10d::Work>, torch::Tensor>> m_pending;
};

} // namespace

PipelineReport runOneForwardOneBackward(StageRunner& runner, Mesh& mesh, const std::vector<torch::Tensor>& xs,
    const std::vector<torch::Tensor>& ys, std::vector<int64_t> hidden, double lossScale)
{
    const int p = mesh.stages(), s = mesh.stage();
    const auto m = int64_t(xs.size());
    Links links(mesh, std::move(hidden));
    PipelineReport report;
    auto forward = [&](int64_t i) {
        torch::Tensor in = links.first() ? xs[std::size_t(i)] : links.receive(s - 1, int(2 * i));
        torch::Tensor out = runner.forward(i, in, ys[std::size_t(i)]);
        if (links.last())
            report.lossSum += out.item<double>();
        else
            links.send(out, s + 1, int(2 * i));
    };
    auto backward = [&](int64_t i) {
        torch::Tensor grad = links.last() ? torch::Tensor() : links.receive(s + 1, int(2 * i + 1));
        torch::Tensor gradIn = runner.backward(i, grad, lossScale);
        if (!links.first())
            links.send(gradIn, s - 1, int(2 * i + 1));
    };
    const int64_t warmup = std::min<int64_t>(p - s - 1, m);
    for (int64_t i = 0; i < warmup; ++i)
        forward(i);
    for (int64_t i = 0; i < m - warmup; ++i) {
        forward(warmup + i);
        backward(i);
    }
    for (int64_t i = m - warmup; i < m; ++i)
        backward(i);
    links.finish();
    report.waitMs = links.waitMs;
    report.bubbleOnPaper = double(p - 1) / double(m + p - 1);
    return report;
}

double runForwardOnly(StageRunner& runner, Mesh& mesh, const std::vector<torch::Tensor>& xs,
    const std::vector<torch::Tensor>& ys, std::vector<int64_t> hidden)
{
    const int s = mesh.stage();
    Links links(mesh, std::move(hidden));
    double lossSum = 0;
    for (std::size_t i = 0; i < xs.size(); ++i) {
        torch::Tensor in = links.first() ? xs[i] : links.receive(s - 1, int(2 * i));
        torch::Tensor out = runner.forward(int64_t(i), in, ys[i]);
        if (links.last())
            lossSum += out.item<double>();
        else
            links.send(out, s + 1, int(2 * i));
    }
    links.finish();
    return lossSum;
}

} // namespace crowdtrain::engine::parallel
