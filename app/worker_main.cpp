// crowdtrain-worker: the volunteer daemon (design.md, "Processes").
#include "app/args.h"

#include <iostream>

int main(int argc, char** argv)
{
    using crowdtrain::app::Args;
    Args args("crowdtrain-worker", "the Crowdtrain volunteer daemon",
        "  crowdtrain-worker join ENDPOINT PROJECT   train as a volunteer of PROJECT at ENDPOINT");
    args.option("data-dir", "folder for the volunteer's key pair and state", "$XDG_DATA_HOME/crowdtrain");
    if (auto exitCode = args.parse(crowdtrain::app::argumentsOf(argc, argv)))
        return *exitCode;
    std::cerr << "crowdtrain-worker: the volunteer protocol is not built yet; see --help\n";
    return 2;
}
