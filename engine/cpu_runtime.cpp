#include "engine/cpu_runtime.h"

#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <filesystem>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <thread>
#include <torch/torch.h>
#include <unistd.h>

namespace crowdtrain::engine {
namespace {

constexpr const char* kReexecMarker = "CROWDTRAIN_CPU_REEXEC";

// OpenBLAS's C entry points, looked up at run time: the BLAS behind libtorch
// may be OpenBLAS, the reference BLAS, BLIS or MKL, chosen by the system.
struct OpenBlas {
    char* (*coreName)() = nullptr;
    int (*parallel)() = nullptr;
    int (*getThreads)() = nullptr;
    void (*setThreads)(int) = nullptr;

    static const OpenBlas& get()
    {
        static const OpenBlas blas = [] {
            OpenBlas b;
            b.coreName = reinterpret_cast<char* (*)()>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
            b.parallel = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "openblas_get_parallel"));
            b.getThreads = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
            b.setThreads = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
            return b;
        }();
        return blas;
    }
    bool present() const { return coreName != nullptr; }
};

// Kernel sets from weakest to strongest, with what the CPU needs for each.
int coreRank(const std::string& name)
{
    static const char* const kOrder[]
        = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Barcelona", "Bobcat", "Bulldozer", "Piledriver",
            "Steamroller", "Excavator", "Sandybridge", "Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids"};
    for (std::size_t i = 0; i < std::size(kOrder); ++i)
        if (strcasecmp(name.c_str(), kOrder[i]) == 0)
            return int(i);
    return -1; // unknown names are trusted
}

std::string bestCoreForThisCpu()
{
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl")
        && __builtin_cpu_supports("avx512dq"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return "Haswell";
    if (__builtin_cpu_supports("avx"))
        return "Sandybridge";
    return "";
}

std::string threadingName(int parallel)
{
    switch (parallel) {
    case 0:
        return "sequential";
    case 1:
        return "pthreads";
    case 2:
        return "openmp";
    default:
        return "";
    }
}

// glibc serves blocks above its mmap threshold (128 KiB at first, raised
// as such blocks are freed) with fresh pages, and hands free memory above
// its trim threshold back to the system; a training step allocates and
// frees the same activations every time, so both turn into page faults on
// every step (on the nanoGPT benchmark's model about a sixth of a step).
// Keep blocks up to 32 MiB (glibc's most) in the heap, and up to 256 MiB
// of free heap mapped. An explicit MALLOC_* or GLIBC_TUNABLES wins.
void keepHeapMapped()
{
#if defined(__GLIBC__)
    for (const char* name : {"GLIBC_TUNABLES", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"})
        if (std::getenv(name))
            return;
    ::mallopt(M_MMAP_THRESHOLD, 32 << 20);
    ::mallopt(M_TRIM_THRESHOLD, 256 << 20);
#endif
}

} // namespace

void prepareCpuRuntime(char** argv)
{
    keepHeapMapped();
    const OpenBlas& blas = OpenBlas::get();
    if (!blas.present() || std::getenv("OPENBLAS_CORETYPE") || std::getenv(kReexecMarker))
        return;
    const std::string current = blas.coreName();
    const std::string best = bestCoreForThisCpu();
    const int currentRank = coreRank(current);
    if (best.empty() || currentRank < 0 || currentRank >= coreRank(best))
        return;
    ::setenv("OPENBLAS_CORETYPE", best.c_str(), 1);
    ::setenv(kReexecMarker, current.c_str(), 1);
    // By its real path: the process's name (comm, what `ps` and `top` show)
    // comes from the file executed, and /proc/self/exe would make it "exe".
    std::error_code ec;
    const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
    ::execv(ec ? "/proc/self/exe" : self.c_str(), argv);
    // execv failed (no /proc?): carry on with the slower kernels.
    ::unsetenv("OPENBLAS_CORETYPE");
}

void configureCpuThreads(int threads)
{
    const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
    torch::set_num_threads(threads > 0 ? threads : cores);
    const OpenBlas& blas = OpenBlas::get();
    // A pthreads OpenBLAS spawns its own pool next to libtorch's OpenMP pool;
    // both busy-wait, and on a small machine they halve each other's speed.
    if (blas.present() && blas.parallel && blas.parallel() == 1 && blas.setThreads) {
        const char* override = std::getenv("CROWDTRAIN_BLAS_THREADS");
        blas.setThreads(override ? std::max(1, std::atoi(override)) : 1);
    }
}

CpuRuntimeInfo cpuRuntimeInfo()
{
    CpuRuntimeInfo info;
    const OpenBlas& blas = OpenBlas::get();
    if (blas.present()) {
        info.blasCore = blas.coreName();
        info.blasThreading = blas.parallel ? threadingName(blas.parallel()) : "";
        info.blasThreads = blas.getThreads ? blas.getThreads() : 0;
    }
    info.bestCore = bestCoreForThisCpu();
    info.torchThreads = torch::get_num_threads();
    info.reexecuted = std::getenv(kReexecMarker) != nullptr;
    return info;
}

} // namespace crowdtrain::engine
