# The emulated home link (docs/homelink.md), as root: two network namespaces,
# a shaped veth pair and bench/link_relay; the measured rates and round trip
# must match the profile, then a coordinator and one volunteer train across it.
# Skipped (exit status 77, with its reason) for a user who is not root; as
# root (CI) it fails, never skips, where namespaces cannot be made.
add_test(NAME homelink
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/homelink_test.sh ${CMAKE_RUNTIME_OUTPUT_DIRECTORY}
                 ${PROJECT_SOURCE_DIR}/../shared/data/tinyshakespeare.txt)
set_tests_properties(homelink PROPERTIES TIMEOUT 240 ENVIRONMENT "OMP_NUM_THREADS=1" RUN_SERIAL TRUE
                     SKIP_RETURN_CODE 77)
