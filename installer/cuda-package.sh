#!/usr/bin/env bash
# Makes the crowdtrain-core-cuda .deb from what installer/cuda-core.sh built:
# /usr/libexec/crowdtrain/crowdtrain-core-cuda (beside the CPU core, where
# the daemon looks for it) and, in /usr/libexec/crowdtrain/cuda-lib, every
# library it loads but the NVIDIA driver's libcuda.so.1. It depends on the
# crowdtrain package of the same version (the daemon that runs it).
#   installer/cuda-package.sh [CORE_BUILD_DIR] [OUT_DIR]
# CORE_BUILD_DIR: default build/core-cuda (built by installer/cuda-core.sh
# when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/core-cuda}
out=${2:-$build/packages}
[ -x "$build/bin/crowdtrain-core-cuda" ] || installer/cuda-core.sh
version=$(sed -n 's/^project(Crowdtrain VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
[ -n "$version" ] || { echo "cuda-package: no version in CMakeLists.txt" >&2; exit 1; }
mkdir -p "$out"
out=$(realpath "$out")
root=$(mktemp -d "$out/root.XXXXXX")
trap 'rm -rf "$root"' EXIT

libexec=$root/usr/libexec/crowdtrain
install -D -m 0755 "$build/bin/crowdtrain-core-cuda" "$libexec/crowdtrain-core-cuda"
strip --strip-unneeded "$libexec/crowdtrain-core-cuda"
mkdir -p "$libexec/cuda-lib"
cp -a "$build/bin/cuda-lib/." "$libexec/cuda-lib/"
chmod 0644 "$libexec"/cuda-lib/*
doc=$root/usr/share/doc/crowdtrain-core-cuda
install -D -m 0644 installer/package/copyright-cuda "$doc/copyright"
gzip -9n -c installer/package/changelog > "$doc/changelog.gz"

mkdir -p "$root/DEBIAN"
installed_kib=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat > "$root/DEBIAN/control" <<CONTROL
Package: crowdtrain-core-cuda
Version: $version
Architecture: amd64
Maintainer: The Crowdtrain developers <crowdtrain@users.noreply.github.com>
Installed-Size: $installed_kib
Depends: crowdtrain (= $version), libc6 (>= 2.28), libstdc++6 (>= 12), libgcc-s1
Section: science
Priority: optional
Homepage: https://github.com/crowdtrain/crowdtrain
Description: Crowdtrain's training core for NVIDIA GPUs
 The program that trains on an NVIDIA GPU for the Crowdtrain volunteer
 daemon, built against PyTorch's CUDA libtorch. The daemon starts it when
 NVML sees an NVIDIA GPU (or the device setting asks for CUDA) and falls
 back to the CPU core of the crowdtrain package when it finds none.
 .
 libtorch and the CUDA runtime libraries it needs (cuBLAS, cuDNN, NCCL,
 cuFFT, cuRAND, cuSPARSE, cuSPARSELt, NVSHMEM, NVRTC) are bundled: Debian
 ships no CUDA build of libtorch, and the versions must match the ones it
 was built against. Only the NVIDIA driver comes from the system (CUDA 13:
 driver 580 or newer).
CONTROL
dpkg-deb --root-owner-group -Zzstd -z3 --build "$root" "$out" >/dev/null
deb=$out/crowdtrain-core-cuda_${version}_amd64.deb
[ -f "$deb" ] || { echo "cuda-package: dpkg-deb made no $deb" >&2; exit 1; }
ls -l "$deb"
echo "cuda-package: installed size $((installed_kib / 1024)) MiB"
