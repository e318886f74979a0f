// crowdtrain-server: a project coordinator (design.md, "Processes").
#include "app/args.h"

#include <iostream>

int main(int argc, char** argv)
{
    using crowdtrain::app::Args;
    Args args("crowdtrain-server", "the Crowdtrain project coordinator",
        "  crowdtrain-server PROJECT_SPEC...   coordinate the projects described by the spec files");
    args.option("bind", "ZeroMQ endpoint for requests", "tcp://127.0.0.1:7400");
    if (auto exitCode = args.parse(crowdtrain::app::argumentsOf(argc, argv)))
        return *exitCode;
    std::cerr << "crowdtrain-server: the coordinator is not built yet; see --help\n";
    return 2;
}
