# Volunteer agent pieces that need no coordinator: task windows, local state,
# key handling, update application, backoff, the inner trainer, byte counting.
crowdtrain_test(tst_volunteer SOURCES tst_volunteer.cpp LIBS crowdtrain::volunteer crowdtrain::core_service)

# The training core as its own process: frames, the windows file, a real
# crowdtrain-core trained, killed, hung and garbled (docs/protocol.md §13).
crowdtrain_test(tst_core SOURCES tst_core.cpp coordinator_process.h LIBS crowdtrain::volunteer crowdtrain::core_service
    Qt6::Core nlohmann_json::nlohmann_json)
add_dependencies(tst_core crowdtrain-server crowdtrain-prepare)
# The same cases against the CUDA core (a CUDA libtorch trains on the CPU
# too): CTest's cuda_core test builds it first (installer/CMakeLists.txt).
add_test(NAME tst_core_on_cuda_core COMMAND tst_core)
set_tests_properties(tst_core_on_cuda_core PROPERTIES
    TIMEOUT 600 LABELS cuda FIXTURES_REQUIRED cuda_core
    ENVIRONMENT "QT_QPA_PLATFORM=offscreen;OMP_NUM_THREADS=2;CROWDTRAIN_TEST_CORE=${PROJECT_SOURCE_DIR}/build/core-cuda/bin/crowdtrain-core-cuda")
