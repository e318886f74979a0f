# cmake -DSOURCE_DIR=... -P CheckFormat.cmake
# Fails when any of our C++ sources differs from what clang-format makes of it.
find_program(CLANG_FORMAT NAMES clang-format clang-format-14 REQUIRED)
file(GLOB_RECURSE sources
     "${SOURCE_DIR}/core/*.cpp" "${SOURCE_DIR}/core/*.h"
     "${SOURCE_DIR}/engine/*.cpp" "${SOURCE_DIR}/engine/*.h"
     "${SOURCE_DIR}/net/*.cpp" "${SOURCE_DIR}/net/*.h"
     "${SOURCE_DIR}/ui/*.cpp" "${SOURCE_DIR}/ui/*.h"
     "${SOURCE_DIR}/app/*.cpp" "${SOURCE_DIR}/app/*.h"
     "${SOURCE_DIR}/tests/*.cpp" "${SOURCE_DIR}/tests/*.h"
     "${SOURCE_DIR}/bench/*.cpp" "${SOURCE_DIR}/bench/*.h")
execute_process(COMMAND ${CLANG_FORMAT} --dry-run --Werror ${sources}
                RESULT_VARIABLE result ERROR_VARIABLE errors)
if(NOT result EQUAL 0)
    message(FATAL_ERROR "Sources do not match .clang-format (run tools/format.sh):\n${errors}")
endif()
list(LENGTH sources count)
message(STATUS "${count} files match .clang-format")
