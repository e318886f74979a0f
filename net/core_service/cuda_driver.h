#pragma once

// What the NVIDIA driver on this machine offers, asked without linking it:
// libcuda.so.1 is opened at run time (a machine with no NVIDIA driver has
// none), and cuDriverGetVersion says the newest CUDA version it runs. The
// CUDA core reports from it why it finds no device, naming the driver a
// volunteer needs.

#include <string>

namespace crowdtrain::coreservice {

struct CudaDriver {
    bool found = false; // libcuda.so.1 loads
    int cudaVersion = 0; // 1000 x major + 10 x minor, as CUDA writes it; 0 unknown
};

CudaDriver probeCudaDriver();

// The first NVIDIA Linux driver branch that runs CUDA `major` (13: 580).
int driverBranchFor(int cudaMajor);

// Why a CUDA core built for `runtimeVersion` (e.g. 13000) finds no device,
// in words a volunteer can act on.
std::string noCudaDeviceNote(const CudaDriver& driver, int runtimeVersion);

} // namespace crowdtrain::coreservice
