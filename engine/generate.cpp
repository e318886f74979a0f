#include "engine/generate.h"

#include <ATen/CPUGeneratorImpl.h>

namespace crowdtrain::engine {

std::vector<int64_t> generate(Gpt& model, const std::vector<int64_t>& prompt, const SampleOptions& options,
    const std::function<bool(int64_t)>& onToken)
{
    TORCH_CHECK(!prompt.empty(), "generation needs at least one prompt token");
    torch::NoGradGuard noGrad;
    const bool wasTraining = model->is_training();
    model->eval();
    const auto device = model->parameters().front().device();
    auto generator = at::detail::createCPUGenerator(options.seed);
    const int64_t blockSize = model->config().blockSize;

    std::vector<int64_t> context = prompt;
    std::vector<int64_t> produced;
    for (int64_t i = 0; i < options.maxNewTokens; ++i) {
        const int64_t start = std::max<int64_t>(0, int64_t(context.size()) - blockSize);
        auto idx = torch::tensor(std::vector<int64_t>(context.begin() + start, context.end()), torch::kLong)
                       .unsqueeze(0)
                       .to(device);
        auto logits = model->forward(idx).select(1, -1).squeeze(0).to(torch::kCPU, torch::kFloat);
        int64_t next;
        if (options.temperature <= 0) {
            next = logits.argmax().item<int64_t>();
        } else {
            logits = logits / options.temperature;
            if (options.topK > 0 && options.topK < logits.size(0)) {
                const auto kth = std::get<0>(logits.topk(options.topK)).index({-1});
                logits = logits.masked_fill(logits < kth, -std::numeric_limits<float>::infinity());
            }
            next = torch::multinomial(torch::softmax(logits, -1), 1, false, generator).item<int64_t>();
        }
        context.push_back(next);
        produced.push_back(next);
        if (onToken && !onToken(next))
            break;
    }
    if (wasTraining)
        model->train();
    return produced;
}

} // namespace crowdtrain::engine
