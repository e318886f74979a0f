#!/usr/bin/env bash
# Builds the CUDA training core, crowdtrain-core-cuda, against PyTorch's CUDA
# libtorch: the torch wheel from PyPI at a pinned version and SHA-256 (it
# carries libtorch's headers, CMake config and libraries), with the CUDA
# toolkit 13 in /usr/local/cuda for the CUDA libraries it links. No GPU is
# needed to build it.
#
# The result is build/core-cuda/bin/crowdtrain-core-cuda with every library
# it loads beside it in build/core-cuda/bin/cuda-lib (its RUNPATH is
# $ORIGIN/cuda-lib): libtorch's, the CUDA runtime libraries from the toolkit,
# and the three libtorch needs that the toolkit lacks (cuFile, cuSPARSELt,
# NVSHMEM: NVIDIA's wheels on PyPI, pinned the same way). Only the driver
# (libcuda.so.1) comes from the volunteer's machine. installer/cuda-package.sh
# makes the crowdtrain-core-cuda .deb of that tree.
#
#   installer/cuda-core.sh            # download (once), build, link, bundle
#   installer/cuda-core.sh --check    # the same, then: the core starts here and
#                                     # says "no device" (this machine has no GPU)
set -euo pipefail
cd "$(dirname "$0")/.."

torch_version=2.11.0
wheel=torch-${torch_version}-cp311-cp311-manylinux_2_28_x86_64.whl
wheel_sha256=7aa2f9bbc6d4595ba72138026b2074be1233186150e9292865e04b7a63b8c67a
# What torch 2.11.0's wheel requires (its METADATA) and CUDA 13.0's toolkit
# does not ship: name, version, wheel file, SHA-256.
extra_wheels=(
    "nvidia-cufile 1.15.1.6 nvidia_cufile-1.15.1.6-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl 08a3ecefae5a01c7f5117351c64f17c7c62efa5fffdbe24fc7d298da19cd0b44"
    "nvidia-cusparselt-cu13 0.8.0 nvidia_cusparselt_cu13-0.8.0-py3-none-manylinux2014_x86_64.whl 25e30a8a7323935d4ad0340b95a0b69926eee755767e8e0b1cf8dd85b197d3fd"
    "nvidia-nvshmem-cu13 3.4.5 nvidia_nvshmem_cu13-3.4.5-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl 290f0a2ee94c9f3687a02502f3b9299a9f9fe826e6d0287ee18482e78d495b80"
)
cuda_root=${CUDA_ROOT:-/usr/local/cuda}
stage=build/cuda-torch
out=build/core-cuda
bundle=$out/bin/cuda-lib

# download NAME==VERSION FILE SHA256: the wheel into $stage, checked.
download() {
    if [ ! -f "$stage/$2" ]; then
        python3 -m pip download --no-deps --only-binary=:all: --python-version 3.11 \
            --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
            -d "$stage" "$1"
    fi
    echo "$3  $stage/$2" | sha256sum -c -
}

# unpack WHEEL DIR PREFIX...: the wheel's members under the prefixes into DIR.
unpack() {
    python3 - "$@" <<'PY'
import sys, zipfile
wheel, into, prefixes = sys.argv[1], sys.argv[2], tuple(sys.argv[3:])
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith(prefixes) and not name.endswith("libtorch_python.so"):
            z.extract(name, into)
PY
}

mkdir -p "$stage"
if [ ! -f "$stage/torch/share/cmake/Torch/TorchConfig.cmake" ]; then
    download "torch==${torch_version}" "$wheel" "$wheel_sha256"
    # Only what a C++ build needs: headers, CMake config, libraries.
    unpack "$stage/$wheel" "$stage" torch/include/ torch/share/cmake/ torch/lib/
    rm -f "$stage/$wheel"
fi
for entry in "${extra_wheels[@]}"; do
    read -r name version file sha <<<"$entry"
    if [ ! -f "$stage/nvidia/.$name-$version" ]; then
        download "$name==$version" "$file" "$sha"
        unpack "$stage/$file" "$stage" nvidia/
        rm -f "$stage/$file"
        touch "$stage/nvidia/.$name-$version"
    fi
done

if [ ! -x "$cuda_root/bin/nvcc" ]; then
    echo "cuda-core: no CUDA toolkit at $cuda_root (set CUDA_ROOT)" >&2
    exit 1
fi
# The libraries libtorch_cuda needs at link time come from the toolkit; those
# it only loads (cuDNN, NCCL, cuSPARSELt, NVSHMEM) need not be found here.
# c10_LIBRARY: the wheel's TorchConfig looks for c10 in the system's folders
# before its own, so Debian's libtorch would otherwise be on the link line.
cmake -S . -B "$out" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCROWDTRAIN_CORE_ONLY=ON \
    -DCMAKE_PREFIX_PATH="$PWD/$stage/torch/share/cmake" -Dc10_LIBRARY="$PWD/$stage/torch/lib/libc10.so" \
    -DCUDAToolkit_ROOT="$cuda_root" \
    -DCMAKE_CUDA_COMPILER="$cuda_root/bin/nvcc" \
    -DCMAKE_EXE_LINKER_FLAGS="-Wl,--allow-shlib-undefined -Wl,-rpath-link,$cuda_root/lib64" \
    ${CMAKE_CXX_COMPILER_LAUNCHER:+-DCMAKE_CXX_COMPILER_LAUNCHER=$CMAKE_CXX_COMPILER_LAUNCHER}
cmake --build "$out" --target crowdtrain-core-cuda

# The bundle: what the loader resolves for the core (driver and system
# libraries aside), plus what libtorch and cuDNN load with dlopen.
search="$PWD/$stage/torch/lib:$cuda_root/lib64:$(realpath "$cuda_root")/lib"
for dir in "$stage"/nvidia/*/lib; do search="$search:$PWD/$dir"; done
mkdir -p "$bundle"
LD_LIBRARY_PATH="$search" ldd "$out/bin/crowdtrain-core-cuda" > "$out/ldd.txt"
if grep -q "not found" "$out/ldd.txt"; then
    grep "not found" "$out/ldd.txt" >&2
    echo "cuda-core: libraries the core needs are missing" >&2
    exit 1
fi
awk '$2 == "=>" && $3 ~ /^\// {print $3}' "$out/ldd.txt" | while read -r lib; do
    case "$lib" in
    /lib/* | /usr/lib/*) ;; # the system's (libc, libstdc++, ...): Depends
    *) cp -uL "$lib" "$bundle/$(basename "$lib")" ;;
    esac
done
IFS=: read -ra dirs <<<"$search"
for pattern in 'libtorch_cuda_linalg.so' 'libtorch_global_deps.so' 'libcudnn_*.so.9' 'libnvrtc-builtins*.so.13.*' 'libnvrtc.so.13' 'libcupti.so.13' 'libnvshmem_device.bc'; do
    for dir in "${dirs[@]}"; do
        for lib in "$dir"/$pattern; do
            [ -e "$lib" ] && cp -uL "$lib" "$bundle/$(basename "$lib")"
        done
    done
done
# A previous layout put the libraries in bin/lib.
rm -rf "$out/bin/lib"
echo "cuda-core: $(ls "$bundle" | wc -l) libraries, $(du -sh "$bundle" | cut -f1) in $bundle"
readelf -d "$out/bin/crowdtrain-core-cuda" | grep -q 'RUNPATH.*\$ORIGIN/cuda-lib' \
    || { echo "cuda-core: the core's RUNPATH is not \$ORIGIN/cuda-lib" >&2; exit 1; }

if [ "${1:-}" = "--check" ]; then
    # A CUDA core on a machine without a GPU must say so and exit cleanly,
    # never crash: the daemon then trains on the CPU core. No
    # LD_LIBRARY_PATH: the bundle alone must do.
    env -u LD_LIBRARY_PATH "$out/bin/crowdtrain-core-cuda" probe | tee "$out/probe.json"
    grep -q '"family":"cuda"' "$out/probe.json"
fi
