# Sharded data parallel (ZeRO 0-3), tensor and pipeline parallel: each
# layout on 2 and 4 c10d Gloo ranks (processes on loopback) against one process.
crowdtrain_test(tst_parallel_zero SOURCES tst_parallel_zero.cpp parallel_fixtures.h LIBS crowdtrain::engine TIMEOUT 300)
crowdtrain_test(tst_parallel_tp SOURCES tst_parallel_tp.cpp parallel_fixtures.h LIBS crowdtrain::engine TIMEOUT 300)
crowdtrain_test(tst_parallel_pipeline SOURCES tst_parallel_pipeline.cpp parallel_fixtures.h LIBS crowdtrain::engine TIMEOUT 300)

# A volunteer's several devices: the memory plan, a team of in-process ranks
# (two CPU "devices") against one device, and an agent training a real
# coordinator's tasks across them.
crowdtrain_test(tst_device_team SOURCES tst_device_team.cpp parallel_fixtures.h coordinator_process.h free_port.h
    LIBS crowdtrain::volunteer crowdtrain::core_service Qt6::Core nlohmann_json::nlohmann_json TIMEOUT 300)
add_dependencies(tst_device_team crowdtrain-server crowdtrain-prepare)
