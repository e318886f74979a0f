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
#                                 git): nlohmann_json's and msgpack's headers
#                                 and CMake packages, Tiny Shakespeare, GPT-2's
#                                 tokenizer, and the volunteer kit: the
#                                 daemon, the CLI (build/ci) and a coordinator
#                                 built against the pinned PyTorch wheel's
#                                 libtorch (built into build/server-wheel:
#                                 about 40 minutes on 2 cores the first time), with
#                                 the libraries they load that are not
#                                 glibc's, the compiler runtime's or libtorch's
#   tools/gpu-check.sh [DEVICE]   build into build/gpu-check and check DEVICE
#                                 (default cuda; cpu works anywhere)
#   tools/gpu-check.sh volunteer [DEVICE]
#                                 a volunteer's whole path (issue 40 item 3,
#                                 tools/gpu_volunteer.py): a local coordinator,
#                                 the real daemon joined to it through its hub
#                                 link, a GPT-2 124M project trained on the
#                                 GPU by a CUDA core built here against
#                                 python3's torch; checks the busy share, the
#                                 VRAM cap, the pause for another program on
#                                 the GPU, NVML in `status`, a core killed
#                                 mid-task and the memory given back while
#                                 snoozed. The daemon, CLI and coordinator
#                                 come from the stage (below), their Debian
#                                 libraries beside them; the coordinator is
#                                 built against PyTorch's libtorch and runs
#                                 on this machine's. On cpu: the same checks
#                                 with build/ci's programs and a tiny model
#                                 (CTest's gpu_volunteer_on_cpu).
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
    rm -rf "$stage" && mkdir -p "$stage/deps/include" "$stage/deps/share/cmake/msgpack" "$stage/gpt2"
    cp -r /usr/include/nlohmann "$stage/deps/include/"
    cp -r /usr/share/cmake/nlohmann_json "$stage/deps/share/cmake/"
    # msgpack-cxx's headers without Boost (Debian's package config pulls in
    # Boost's headers, which such a machine lacks; the core needs none).
    cp -r /usr/include/msgpack /usr/include/msgpack.hpp "$stage/deps/include/"
    cat > "$stage/deps/share/cmake/msgpack/msgpack-config.cmake" <<'CMAKE'
add_library(msgpackc-cxx INTERFACE IMPORTED)
set_target_properties(msgpackc-cxx PROPERTIES
    INTERFACE_COMPILE_DEFINITIONS "MSGPACK_DEFAULT_API_VERSION=3;MSGPACK_NO_BOOST"
    INTERFACE_INCLUDE_DIRECTORIES "${CMAKE_CURRENT_LIST_DIR}/../../../include")
set(msgpack_FOUND TRUE)
CMAKE
    data=${CROWDTRAIN_SHARED_DATA:-../shared/data}
    cp "${CROWDTRAIN_CORPUS:-$data/tinyshakespeare.txt}" "$stage/corpus.txt"
    cp "$data/gpt2/encoder.json" "$data/gpt2/vocab.bpe" "$stage/gpt2/"
    # The volunteer kit.
    server=${CROWDTRAIN_SERVER_WHEEL:-build/server-wheel}
    programs=${CROWDTRAIN_PROGRAMS:-build/ci/bin}
    # The coordinator against the pinned wheel's libtorch (which
    # installer/cuda-core.sh downloads and checks into build/cuda-torch).
    wheel=$PWD/build/cuda-torch/torch/share/cmake
    [ -f "$wheel/Torch/TorchConfig.cmake" ] || installer/cuda-core.sh
    cuda_root=${CUDA_ROOT:-/usr/local/cuda}
    cmake -S . -B "$server" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF \
        -DCMAKE_PREFIX_PATH="$wheel" -Dc10_LIBRARY="$wheel/../../lib/libc10.so" \
        -DCUDAToolkit_ROOT="$cuda_root" -DCMAKE_CUDA_COMPILER="$cuda_root/bin/nvcc" \
        -DCMAKE_EXE_LINKER_FLAGS="-Wl,--allow-shlib-undefined -Wl,-rpath-link,$cuda_root/lib64" >/dev/null
    cmake --build "$server" --target crowdtrain-server | tail -n 1
    kit=$stage/volunteer
    mkdir -p "$kit/bin" "$kit/lib"
    cp "$server/bin/crowdtrain-server" "$programs/crowdtrain-worker" "$programs/crowdtrain-daemon" "$kit/bin/"
    for program in "$kit"/bin/*; do
        LD_LIBRARY_PATH=$PWD/build/cuda-torch/torch/lib ldd "$program" | awk '$2 == "=>" && $3 ~ /^\// {print $3}'
    done | sort -u | while read -r lib; do
        case "$(basename "$lib")" in
        # glibc's own, the compiler's runtime, the driver's, and libtorch's
        # (the GPU machine's own, which its PyTorch needs as they are)
        libc.so* | libm.so* | libdl.so* | libpthread.so* | librt.so* | libresolv.so* | ld-linux* | libstdc++* | \
            libgcc_s* | libcuda.so* | libnccl* | \
            libtorch* | libc10* | libgomp* | libcudart* | libnv* | libshm* | libcaffe2* | libcublas* | libcudnn* | \
            libcufft* | libcurand* | libcusparse* | libcusolver* | libcupti* | libcufile*) ;;
        *) cp -L "$lib" "$kit/lib/" ;;
        esac
    done
    du -sh "$stage" "$kit"
    exit 0
fi

mode=check
if [ "${1:-}" = speed ] || [ "${1:-}" = volunteer ]; then
    mode=$1
    shift
fi
device=${1:-cuda}
python=${PYTHON:-python3}
corpus=${CROWDTRAIN_CORPUS:-$stage/corpus.txt}
[ -f "$corpus" ] || corpus=../shared/data/tinyshakespeare.txt
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ "$mode" = volunteer ] && [ "$device" = cpu ]; then
    # The same checks on the CPU core, with this machine's programs.
    "$python" tools/gpu_volunteer.py cpu "${CROWDTRAIN_BIN:-build/ci/bin}" "$corpus" "$work/run" ${VOLUNTEER_ARGS:-}
    exit 0
fi
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
    "$bin/crowdtrain-prepare" "$corpus" --out "$work/data" --tokenizer char --val-fraction 0.1 >/dev/null
    tiny=()
    [ "$device" = cpu ] && tiny=(--tiny)
    PYTHON="$python" "$python" tools/gpu_speed.py "$device" "$bin" "$work/data" "${tiny[@]}"
    echo "speed run: $((SECONDS - began)) s in all"
    exit 0
fi
if [ "$mode" = volunteer ]; then
    began=$SECONDS
    kit=$stage/volunteer
    configure >/dev/null
    cmake --build build/gpu-check --target crowdtrain-prepare | tail -n 1
    # The CUDA core against this machine's torch (its msgpack from the stage).
    cmake -S . -B build/gpu-core -G Ninja -DCMAKE_BUILD_TYPE=Release -DCROWDTRAIN_CORE_ONLY=ON \
          "-DCMAKE_PREFIX_PATH=$torch_prefix;$stage/deps" ${nccl:+"-DCROWDTRAIN_NCCL_INCLUDE_DIR=$nccl"} >/dev/null
    cmake --build build/gpu-core --target crowdtrain-core-cuda | tail -n 1
    echo "build: $((SECONDS - began)) s"
    mkdir -p "$work/bin"
    ln -s "$PWD/$kit/bin/"* "$PWD/build/gpu-check/bin/crowdtrain-prepare" "$work/bin/"
    torch_lib=$("$python" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
    nvidia_libs=$("$python" -c 'import glob, os, nvidia; print(":".join(sorted(glob.glob(os.path.join(list(nvidia.__path__)[0], "*", "lib")))))' \
                  2>/dev/null || true)
    export LD_LIBRARY_PATH="$PWD/$kit/lib:$torch_lib${nvidia_libs:+:$nvidia_libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    "$python" tools/gpu_volunteer.py "$device" "$work/bin" "$corpus" "$work/run" \
        --core build/gpu-core/bin/crowdtrain-core-cuda --gpt2-dir "$stage/gpt2" ${VOLUNTEER_ARGS:-}
    echo "volunteer check: $((SECONDS - began)) s in all"
    exit 0
fi
configure
cmake --build build/gpu-check --target crowdtrain-train crowdtrain-prepare bench_device_team
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
