#pragma once

// The daemon's command-line options, declared once: crowdtrain-daemon reads
// them, and crowdtrain-worker declares the same ones and passes those given
// on to the daemon it starts (`run`, `demo`, `join ENDPOINT`).

#include "app/args.h"

#include <string>
#include <vector>

namespace crowdtrain::app {

struct DaemonOption {
    const char* name;
    const char* help;
    const char* defaultValue;
    bool integer;
};

inline const std::vector<DaemonOption>& daemonOptions()
{
    static const std::vector<DaemonOption> options = {
        {"data-dir", "folder for the volunteer's identity, state and downloads", "$XDG_DATA_HOME/crowdtrain", false},
        {"config-dir", "folder for settings.json", "$XDG_CONFIG_HOME/crowdtrain", false},
        {"control-dir", "folder of the control API's sockets", "$XDG_RUNTIME_DIR/crowdtrain", false},
        {"demo-corpus", "text folder of the demo project", "/usr/share/games/fortunes", false},
        {"server-key", "join ENDPOINT: the coordinator's public key (40 Z85 characters or @FILE)", "", false},
        {"data", "join ENDPOINT: the project's prepared data folder (default: fetch each task's pieces)", "", false},
        {"name", "join ENDPOINT: display name on the leaderboard", "", false},
        {"threads", "join ENDPOINT: CPU threads for training (0 = all cores)", "0", true},
        {"device", "join ENDPOINT: cpu, cuda, cuda:N or auto", "cpu", false},
        {"devices",
            "join ENDPOINT: train each task across these devices, comma-separated (cuda:0,cuda:1; cpu,cpu on a CPU): "
            "data parallel, or sharded (ZeRO-3) when the model does not fit one",
            "", false},
        {"max-tasks", "join ENDPOINT: stop after this many submitted tasks (0 = never)", "0", true},
        {"max-rounds", "join ENDPOINT: stop after the model advanced this many versions (0 = never)", "0", true},
        {"swarm-port",
            "join ENDPOINT: port to fetch and share the model state on when the hub seeds it as a torrent (0 = a free "
            "port, off = chunks from the hub only)",
            "0", false},
        {"summary-file",
            "join ENDPOINT: keep the run's summary (JSON) in this file, rewritten at each change of phase, so a killed "
            "run leaves its counts",
            "", false},
    };
    return options;
}

inline void declareDaemonOptions(Args& args)
{
    for (const DaemonOption& o : daemonOptions()) {
        if (o.integer)
            args.integerOption(o.name, o.help, o.defaultValue);
        else
            args.option(o.name, o.help, o.defaultValue);
    }
    args.flag("overlap", "join ENDPOINT: train the next round's task while this one uploads and its round closes");
}

// `--name value` for each daemon option given, to pass on to the daemon.
inline std::vector<std::string> givenDaemonOptions(const Args& args)
{
    std::vector<std::string> names;
    for (const DaemonOption& o : daemonOptions())
        names.push_back(o.name);
    std::vector<std::string> given = args.given(names);
    if (args.isSet("overlap"))
        given.push_back("--overlap");
    return given;
}

} // namespace crowdtrain::app
