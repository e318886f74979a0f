#!/usr/bin/env bash
# Builds the CUDA training core, crowdtrain-core-cuda, against PyTorch's CUDA
# libtorch: the torch wheel from PyPI at a pinned version and SHA-256 (it
# carries libtorch's headers, CMake config and libraries), with the CUDA
# toolkit 13 in /usr/local/cuda for the CUDA libraries it links. No GPU is
# needed to build it. The result is build/core-cuda/bin/crowdtrain-core-cuda;
# its libtorch libraries are copied beside it (build/core-cuda/bin/lib, its
# RUNPATH is $ORIGIN/lib).
#
#   installer/cuda-core.sh            # download (once), build, link
#   installer/cuda-core.sh --check    # the same, then: the core starts here and
#                                     # says "no device" (this machine has no GPU)
set -euo pipefail
cd "$(dirname "$0")/.."

torch_version=2.11.0
wheel=torch-${torch_version}-cp311-cp311-manylinux_2_28_x86_64.whl
wheel_sha256=7aa2f9bbc6d4595ba72138026b2074be1233186150e9292865e04b7a63b8c67a
cuda_root=${CUDA_ROOT:-/usr/local/cuda}
stage=build/cuda-torch
out=build/core-cuda

if [ ! -f "$stage/torch/share/cmake/Torch/TorchConfig.cmake" ]; then
    mkdir -p "$stage"
    if [ ! -f "$stage/$wheel" ]; then
        python3 -m pip download --no-deps --only-binary=:all: --python-version 3.11 \
            --platform manylinux_2_28_x86_64 -d "$stage" "torch==${torch_version}"
    fi
    echo "${wheel_sha256}  $stage/$wheel" | sha256sum -c -
    # Only what a C++ build needs: headers, CMake config, libraries.
    python3 - "$stage/$wheel" "$stage" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for name in z.namelist():
        if name.startswith(("torch/include/", "torch/share/cmake/", "torch/lib/")) and not name.endswith("libtorch_python.so"):
            z.extract(name, sys.argv[2])
PY
    rm -f "$stage/$wheel"
fi

if [ ! -x "$cuda_root/bin/nvcc" ]; then
    echo "cuda-core: no CUDA toolkit at $cuda_root (set CUDA_ROOT)" >&2
    exit 1
fi
# The libraries libtorch_cuda needs at link time come from the toolkit; those
# it only loads (cuDNN, NCCL, cuSPARSELt, NVSHMEM) need not be found here.
cmake -S . -B "$out" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCROWDTRAIN_CORE_ONLY=ON \
    -DCMAKE_PREFIX_PATH="$PWD/$stage/torch/share/cmake" -DCUDAToolkit_ROOT="$cuda_root" \
    -DCMAKE_CUDA_COMPILER="$cuda_root/bin/nvcc" \
    -DCMAKE_EXE_LINKER_FLAGS="-Wl,--allow-shlib-undefined -Wl,-rpath-link,$cuda_root/lib64" \
    ${CMAKE_CXX_COMPILER_LAUNCHER:+-DCMAKE_CXX_COMPILER_LAUNCHER=$CMAKE_CXX_COMPILER_LAUNCHER}
cmake --build "$out" --target crowdtrain-core-cuda
mkdir -p "$out/bin/lib"
cp -u "$stage"/torch/lib/*.so* "$out/bin/lib/"
ls -la "$out/bin/crowdtrain-core-cuda"

if [ "${1:-}" = "--check" ]; then
    # A CUDA core on a machine without a GPU (or without the CUDA libraries it
    # loads) must say so and exit cleanly, never crash: the daemon then
    # trains on the CPU core.
    LD_LIBRARY_PATH="$cuda_root/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$out/bin/crowdtrain-core-cuda" probe \
        | tee "$out/probe.json"
    grep -q '"family":"cuda"' "$out/probe.json"
fi
