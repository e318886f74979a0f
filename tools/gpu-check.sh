#!/usr/bin/env bash
# The engine's CUDA path, checked on a machine that has a CUDA libtorch (in
# python3's torch) but none of the project's other dependencies: it builds the
# `engine` configuration (crowdtrain-train and crowdtrain-prepare only) and
# runs tools/gpu_check.py there (train, resume, data parallel, HF export),
# then, on CUDA, the GPU rows of the parallel-modes table
# (bench/parallel_table.py: DDP, ZeRO-1/2/3, TP, PP, a composition; NCCL,
# one GPU per rank: rows needing more GPUs than the machine has say so) and
# a volunteer's two GPUs as one team (bench/bench_device_team.cpp).
#
#   tools/gpu-check.sh stage      on a development machine: copy what such a
#                                 machine lacks into .gpu-check/ (ignored by
#                                 git): nlohmann_json's headers and CMake
#                                 package, and Tiny Shakespeare
#   tools/gpu-check.sh [DEVICE]   build into build/gpu-check and check DEVICE
#                                 (default cuda; cpu works anywhere)
#   tools/gpu-check.sh speed [DEVICE]
#                                 the speed run (issue 41 items 5-6), at most
#                                 8 minutes on one H100/H200: build only the
#                                 two programs, then tools/gpu_speed.py: GPT-2
#                                 124M in crowdtrain-train (bf16) beside
#                                 PyTorch eager and torch.compile, tokens/s
#                                 and MFU, then the 1.5B capped rows. On cpu
#                                 it runs the same rows at toy sizes (checks
#                                 the scripts). CROWDTRAIN_BIN=DIR: use the
#                                 programs in DIR instead of building.
#
# Environment: PYTHON (default python3) must import torch; its
# torch.utils.cmake_prefix_path is where CMake finds libtorch.
set -euo pipefail
cd "$(dirname "$0")/.."
stage=$PWD/.gpu-check

if [ "${1:-}" = stage ]; then
    rm -rf "$stage" && mkdir -p "$stage/deps/include" "$stage/deps/share/cmake"
    cp -r /usr/include/nlohmann "$stage/deps/include/"
    cp -r /usr/share/cmake/nlohmann_json "$stage/deps/share/cmake/"
    cp "${CROWDTRAIN_CORPUS:-../shared/data/tinyshakespeare.txt}" "$stage/corpus.txt"
    du -sh "$stage"
    exit 0
fi

mode=check
if [ "${1:-}" = speed ]; then
    mode=speed
    shift
fi
device=${1:-cuda}
python=${PYTHON:-python3}
corpus=${CROWDTRAIN_CORPUS:-$stage/corpus.txt}
[ -f "$corpus" ] || corpus=../shared/data/tinyshakespeare.txt
torch_prefix=$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)')
# pip's CUDA torch takes nccl.h from the nvidia-nccl wheel.
nccl=$("$python" -c 'import os, nvidia.nccl as n; print(os.path.join(list(n.__path__)[0], "include"))' \
       2>/dev/null || true)
echo "torch: $("$python" -c 'import torch; print(torch.__version__)') at $torch_prefix; nccl.h: ${nccl:-(default paths)}"
configure() {
    cmake -S . -B build/gpu-check -G Ninja -DCMAKE_BUILD_TYPE=Release -DCROWDTRAIN_ENGINE_ONLY=ON \
          "-DCMAKE_PREFIX_PATH=$torch_prefix;$stage/deps" ${nccl:+"-DCROWDTRAIN_NCCL_INCLUDE_DIR=$nccl"}
}

if [ "$mode" = speed ]; then
    began=$SECONDS
    bin=${CROWDTRAIN_BIN:-}
    if [ -z "$bin" ]; then
        configure >/dev/null
        cmake --build build/gpu-check --target crowdtrain-train crowdtrain-prepare | tail -n 1
        bin=build/gpu-check/bin
    fi
    echo "build: $((SECONDS - began)) s"
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    "$bin/crowdtrain-prepare" "$corpus" --out "$work/data" --tokenizer char --val-fraction 0.1 >/dev/null
    tiny=()
    [ "$device" = cpu ] && tiny=(--tiny)
    PYTHON="$python" "$python" tools/gpu_speed.py "$device" "$bin" "$work/data" "${tiny[@]}"
    echo "speed run: $((SECONDS - began)) s in all"
    exit 0
fi
configure
cmake --build build/gpu-check --target crowdtrain-train crowdtrain-prepare bench_device_team
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$python" tools/gpu_check.py "$device" build/gpu-check/bin "$corpus" "$work"
# The parallel modes on this machine's GPUs (issue 27).
if [ "$device" != cpu ]; then
    CROWDTRAIN_CORPUS="$corpus" "$python" bench/parallel_table.py build/gpu-check --device "$device"
    # A volunteer's GPUs as one team (item 8): one GPU against two in data
    # parallel and ZeRO-3, gpt2-sized blocks (12 layers, 768 wide).
    gpus=$("$python" -c 'import torch; print(torch.cuda.device_count())')
    if [ "$gpus" -ge 2 ]; then
        build/gpu-check/bin/bench_device_team cuda:0,cuda:1 10 12 768
    else
        echo "bench_device_team: needs two GPUs, this machine has $gpus"
    fi
fi
