// crowdtrain-train: train a model alone on this machine from prepared shards.
#include "app/args.h"
#include "engine/gpt_config.h"

#include <iostream>

int main(int argc, char** argv)
{
    using crowdtrain::app::Args;
    Args args("crowdtrain-train", "train a GPT-2 model locally from prepared shards",
        "  crowdtrain-train --data DIR [options]   train");
    args.option("data", "prepared data folder (crowdtrain-prepare)");
    args.option("model", "named model config", "tiny");
    if (auto exitCode = args.parse(crowdtrain::app::argumentsOf(argc, argv)))
        return *exitCode;
    std::cerr << "crowdtrain-train: not built yet; see --help\n";
    return 2;
}
