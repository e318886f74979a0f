# Coordinator aggregation throughput: decodeAccumulate over K submissions.
add_executable(bench_aggregate bench_aggregate.cpp)
target_link_libraries(bench_aggregate PRIVATE crowdtrain::diloco crowdtrain::policy)
