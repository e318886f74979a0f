# The volunteer's limits (issue 16): governor, policy, machine readers, NVML
# absent, network throttle, presets, and governed/paused CPU training.
crowdtrain_test(tst_limits SOURCES tst_limits.cpp transfer_server.h LIBS crowdtrain::limits crowdtrain::daemon crowdtrain::core_service)
