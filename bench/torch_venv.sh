#!/usr/bin/env bash
# A venv under build/ with PyTorch from PyPI, for the Python references of the
# CPU benches (bench/nanogpt_shakespeare.sh): today's torch instead of
# Debian's 1.13. Prints the environment to run its python with, as lines of
# NAME=VALUE (LD_LIBRARY_PATH, PYTHON).
#
# The wheel is the one installer/cuda-core.sh pins (torch 2.11.0, cp311, same
# SHA-256): PyPI's only Linux x86-64 torch is the CUDA build (the CPU-only
# wheels live on download.pytorch.org, which these machines do not reach).
# It runs on a CPU; at import it loads the CUDA runtime libraries, here the
# CUDA toolkit's (CUDA_ROOT, default /usr/local/cuda) and the three
# installer/cuda-core.sh stages in build/cuda-torch/nvidia. Its pure-Python
# dependencies are pinned below.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=build/torch-venv
wheel=torch-2.11.0-cp311-cp311-manylinux_2_28_x86_64.whl
sha256=7aa2f9bbc6d4595ba72138026b2074be1233186150e9292865e04b7a63b8c67a
cuda_root=${CUDA_ROOT:-/usr/local/cuda}
# installer/cuda-core.sh's stage (the wheel, and the NVIDIA libraries the
# toolkit lacks), here or in another checkout.
stage=${CROWDTRAIN_CUDA_STAGE:-build/cuda-torch}
[ -d "$stage/nvidia" ] || { echo "$0: no $stage/nvidia: run installer/cuda-core.sh or set CROWDTRAIN_CUDA_STAGE" >&2; exit 1; }
python=${PYTHON311:-python3}

if [ ! -f "$venv/.installed" ]; then
    "$python" -c 'import sys; assert sys.version_info[:2] == (3, 11), "the pinned wheel is for CPython 3.11"'
    wheels=$stage
    if [ ! -f "$wheels/$wheel" ]; then
        wheels=build/wheels
        mkdir -p "$wheels"
        "$python" -m pip download --no-deps --only-binary=:all: -d "$wheels" torch==2.11.0 >&2
    fi
    echo "$sha256  $wheels/$wheel" | sha256sum -c - >&2
    "$python" -m venv "$venv"
    "$venv/bin/pip" install -q --no-deps "$wheels/$wheel" >&2
    "$venv/bin/pip" install -q --no-deps typing-extensions==4.12.2 filelock==3.16.1 sympy==1.13.3 mpmath==1.3.0 \
        networkx==3.4.2 jinja2==3.1.4 MarkupSafe==3.0.2 fsspec==2024.10.0 numpy==2.1.3 >&2
    touch "$venv/.installed"
fi
libs=$cuda_root/lib64
for dir in "$(realpath "$stage")"/nvidia/*/lib; do
    libs=$libs:$dir
done
echo "LD_LIBRARY_PATH=$libs"
echo "PYTHON=$PWD/$venv/bin/python"
