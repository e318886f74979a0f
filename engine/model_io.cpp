#include "engine/model_io.h"

#include "engine/error_codes.h"
#include "engine/hf_gpt2.h"
#include "engine/trainer.h"

namespace crowdtrain::engine {

NamedParameters namedParameters(Gpt& model)
{
    NamedParameters result;
    for (const auto& item : model->named_parameters())
        result.emplace_back(item.key(), item.value());
    return result;
}

Status loadParameters(Gpt& model, const NamedParameters& values)
{
    auto params = model->named_parameters();
    std::map<std::string, const torch::Tensor*> byName;
    for (const auto& [name, tensor] : values)
        byName[name] = &tensor;
    for (const auto& item : params) {
        const auto it = byName.find(item.key());
        if (it == byName.end())
            return Error::make(errc::kBadWeights, "missing tensor " + item.key());
        if (it->second->sizes() != item.value().sizes())
            return Error::make(errc::kBadWeights, "tensor " + item.key() + " has the wrong shape");
    }
    torch::NoGradGuard noGrad;
    for (auto& item : params)
        item.value().copy_(*byName.at(item.key()));
    return Status::success();
}

Result<Gpt> loadModel(const std::filesystem::path& path)
{
    if (std::filesystem::is_directory(path)) {
        auto weights = importHuggingFaceGpt2(path);
        if (!weights)
            return weights.error();
        Gpt model(weights->config);
        if (Status loaded = loadParameters(model, weights->parameters); !loaded)
            return loaded.error();
        return model;
    }
    auto config = readTrainStateConfig(path);
    if (!config)
        return config.error();
    // The state's own trainer restores the weights; its data source is a
    // placeholder that is never drawn from.
    class NoData : public BatchSource {
    public:
        explicit NoData(int64_t t)
            : m_t(t)
        { }
        void next(int64_t, int64_t*, int64_t*) override { }
        uint64_t position() const override { return 0; }
        void setPosition(uint64_t) override { }
        int64_t blockSize() const override { return m_t; }

    private:
        int64_t m_t;
    };
    TrainOptions options;
    options.model = *config;
    options.device = "cpu";
    TrainData data;
    data.train = std::make_unique<NoData>(config->blockSize);
    auto trainer = Trainer::create(options, std::move(data));
    if (!trainer)
        return trainer.error();
    if (Status loaded = (*trainer)->loadState(path); !loaded)
        return loaded.error();
    return (*trainer)->model();
}

} // namespace crowdtrain::engine
