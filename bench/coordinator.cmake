# Coordinator scale: a real crowdtrain-server against simulated volunteers over CurveZMQ on loopback.
add_executable(bench_coordinator_scale bench_coordinator_scale.cpp coordinator_driver.cpp coordinator_driver.h
    coordinator_process.h)
target_link_libraries(bench_coordinator_scale PRIVATE crowdtrain::coordinator crowdtrain::policy)
target_compile_definitions(bench_coordinator_scale PRIVATE
    CROWDTRAIN_BIN_DIR="${CMAKE_RUNTIME_OUTPUT_DIRECTORY}"
    CROWDTRAIN_SHARED_DATA_DIR="${PROJECT_SOURCE_DIR}/../shared/data")
add_dependencies(bench_coordinator_scale crowdtrain-server crowdtrain-prepare)
# A volunteer that trains honestly and sends a hostile update (bench/attack_swarm.sh).
add_executable(bench_hostile_worker hostile_worker.cpp)
target_link_libraries(bench_hostile_worker PRIVATE crowdtrain::volunteer crowdtrain::policy)
# The loop's longest unanswered heartbeat while rounds close (bench/gpt2_project.sh).
add_executable(bench_close_prober close_prober.cpp)
target_link_libraries(bench_close_prober PRIVATE crowdtrain::coordinator crowdtrain::policy)
# A round close at full size, random weights, no training (issue 41).
add_executable(bench_close bench_close.cpp)
target_link_libraries(bench_close PRIVATE crowdtrain::coordinator crowdtrain::policy)
