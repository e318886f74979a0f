# net/control: the local control API between the app or CLI and the daemon;
# Value and its msgpack and JSON forms, then the sockets (folder, requests, events).
crowdtrain_test(tst_control_value SOURCES tst_control_value.cpp control_fixtures.h LIBS crowdtrain::control)
# One vocabulary: each wire table round-trips, docs/protocol.md lists exactly its words, each error code spelled once.
crowdtrain_test(tst_vocabulary SOURCES tst_vocabulary.cpp LIBS crowdtrain::wire crowdtrain::core)
crowdtrain_test(tst_control_api SOURCES tst_control_api.cpp control_fixtures.h control_server_fixtures.h
    LIBS crowdtrain::control)
crowdtrain_test(tst_control_dir SOURCES tst_control_dir.cpp control_server_fixtures.h LIBS crowdtrain::control)

# The volunteer daemon as a process (crowdtrain-worker run -> crowdtrain-daemon)
# against a real coordinator, through the control API.
crowdtrain_test(tst_daemon SOURCES tst_daemon.cpp coordinator_process.h daemon_process.h
    LIBS crowdtrain::daemon crowdtrain::control Qt6::Core nlohmann_json::nlohmann_json TIMEOUT 900)
add_dependencies(tst_daemon crowdtrain-worker crowdtrain-daemon crowdtrain-server crowdtrain-prepare)

# A volunteer whose coordinator restarts mid-task with another model.
crowdtrain_test(tst_rejoin SOURCES tst_rejoin.cpp coordinator_process.h free_port.h
    LIBS crowdtrain::volunteer Qt6::Core nlohmann_json::nlohmann_json)
add_dependencies(tst_rejoin crowdtrain-server crowdtrain-prepare)

# The daemon's edges: names and types, files it did not write, slow hubs,
# the command line's errors (issue 24).
crowdtrain_test(tst_daemon_edges SOURCES tst_daemon_edges.cpp coordinator_process.h daemon_process.h
    LIBS crowdtrain::daemon crowdtrain::control Qt6::Core nlohmann_json::nlohmann_json TIMEOUT 900)
add_dependencies(tst_daemon_edges crowdtrain-worker crowdtrain-daemon crowdtrain-server crowdtrain-prepare)

# Checkpoints and the full state through the BitTorrent swarm: a coordinator
# seeding, eight daemons (or workers) downloading from it and each other; the
# chunked fallback (issue 28).
crowdtrain_test(tst_checkpoint_swarm SOURCES tst_checkpoint_swarm.cpp coordinator_process.h daemon_process.h
    worker_process.h
    LIBS crowdtrain::daemon crowdtrain::diloco crowdtrain::control crowdtrain::sha256 crowdtrain::swarm Qt6::Core nlohmann_json::nlohmann_json
    TIMEOUT 1200)
add_dependencies(tst_checkpoint_swarm crowdtrain-worker crowdtrain-daemon crowdtrain-server crowdtrain-prepare)
