// crowdtrain-prepare: text corpus -> tokenizer + token shards for a project.
#include "app/args.h"

#include <iostream>

int main(int argc, char** argv)
{
    using crowdtrain::app::Args;
    Args args("crowdtrain-prepare", "turn a text corpus into a tokenizer and token shards",
        "  crowdtrain-prepare INPUT... --out DIR   prepare a data folder");
    args.option("out", "output data folder");
    if (auto exitCode = args.parse(crowdtrain::app::argumentsOf(argc, argv)))
        return *exitCode;
    std::cerr << "crowdtrain-prepare: not built yet; see --help\n";
    return 2;
}
