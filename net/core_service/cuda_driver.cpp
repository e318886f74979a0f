#include "net/core_service/cuda_driver.h"

#include <dlfcn.h>

namespace crowdtrain::coreservice {

namespace {

std::string cudaWords(int version)
{
    return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

} // namespace

CudaDriver probeCudaDriver()
{
    CudaDriver driver;
    void* library = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!library)
        return driver;
    driver.found = true;
    using GetVersion = int (*)(int*);
    if (auto get = reinterpret_cast<GetVersion>(::dlsym(library, "cuDriverGetVersion"))) {
        int version = 0;
        if (get(&version) == 0)
            driver.cudaVersion = version;
    }
    ::dlclose(library);
    return driver;
}

int driverBranchFor(int cudaMajor)
{
    // NVIDIA's CUDA toolkit release notes, table 3 (minimum Linux driver for
    // each CUDA major's minor-version compatibility).
    if (cudaMajor >= 13)
        return 580;
    if (cudaMajor == 12)
        return 525;
    if (cudaMajor == 11)
        return 450;
    return 0;
}

std::string noCudaDeviceNote(const CudaDriver& driver, int runtimeVersion)
{
    const int branch = driverBranchFor(runtimeVersion / 1000);
    const std::string needed
        = branch > 0 ? "NVIDIA driver " + std::to_string(branch) + " or newer" : "an NVIDIA driver";
    if (!driver.found)
        return "no CUDA device: no NVIDIA driver is installed (libcuda.so.1 is missing); the CUDA core needs " + needed;
    if (driver.cudaVersion > 0 && driver.cudaVersion / 1000 < runtimeVersion / 1000)
        return "no CUDA device: the NVIDIA driver runs CUDA up to " + cudaWords(driver.cudaVersion)
            + ", this core's runtime is CUDA " + cudaWords(runtimeVersion) + ": update to " + needed;
    return "no CUDA device: the NVIDIA driver (CUDA " + (driver.cudaVersion > 0 ? cudaWords(driver.cudaVersion) : "?")
        + ") sees no GPU it can use";
}

} // namespace crowdtrain::coreservice
