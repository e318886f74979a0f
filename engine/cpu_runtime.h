#pragma once

// CPU numerics set-up for the programs that train. Two problems real
// volunteers hit with distribution BLAS builds: OpenBLAS 0.3.21 does not
// recognise some new CPUs and falls back to generic kernels (5x slower
// matmuls), and libtorch's OpenMP threads and OpenBLAS's own pthreads fight
// over the same cores. A third is glibc's allocator, which by default returns
// a step's freed activations to the system and faults them back in on the
// next. Call prepareCpuRuntime() first thing in main(), before any thread
// starts; it is not thread-safe.

#include <string>

namespace crowdtrain::engine {

struct CpuRuntimeInfo {
    std::string blasCore; // OpenBLAS's kernel set ("SkylakeX"), or "" when not OpenBLAS
    std::string bestCore; // the best kernel set this CPU supports
    std::string blasThreading; // "pthreads", "openmp", "sequential" or ""
    int blasThreads = 0;
    int torchThreads = 0;
    bool reexecuted = false; // the process restarted itself with OPENBLAS_CORETYPE
};

// Keeps freed blocks of up to 32 MiB in the heap (unless the user set glibc's
// malloc variables). When OpenBLAS chose a kernel set weaker than the CPU
// supports and the user did not set OPENBLAS_CORETYPE, re-executes the
// program once with it set (OpenBLAS reads it only when it loads). Returns
// only if no restart happens.
void prepareCpuRuntime(char** argv);

// Gives the cores to one side: libtorch's intra-op pool gets `threads`
// (0 = all cores) and a pthreads OpenBLAS runs single-threaded inside each of
// them; an OpenMP OpenBLAS shares libtorch's pool and is left alone.
void configureCpuThreads(int threads);

CpuRuntimeInfo cpuRuntimeInfo();

} // namespace crowdtrain::engine
