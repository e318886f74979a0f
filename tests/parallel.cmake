# Sharded data parallel (ZeRO 0-3), tensor and pipeline parallel: each
# layout on 2 and 4 c10d Gloo ranks (processes on loopback) against one process.
crowdtrain_test(tst_parallel_zero SOURCES tst_parallel_zero.cpp parallel_fixtures.h LIBS crowdtrain::engine TIMEOUT 300)
crowdtrain_test(tst_parallel_tp SOURCES tst_parallel_tp.cpp parallel_fixtures.h LIBS crowdtrain::engine TIMEOUT 300)
crowdtrain_test(tst_parallel_pipeline SOURCES tst_parallel_pipeline.cpp parallel_fixtures.h LIBS crowdtrain::engine TIMEOUT 300)
