#!/usr/bin/env bash
# nanoGPT's shakespeare_char CPU run, crowdtrain-train against the same model
# in PyTorch (Python, eager), in one run, one environment. The reference runs
# today's PyTorch from PyPI in a venv under build/ (bench/torch_venv.sh: torch
# 2.11.0, pinned by version and SHA-256); TORCH_REFERENCE=debian runs it on
# Debian's torch 1.13 (/usr/bin/python3) instead.
#
#   bench/nanogpt_shakespeare.sh [BUILD_DIR] [MAX_ITERS]
#
# Prints a markdown table: final validation loss, training tokens/s, ratio.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build/release}
iters=${2:-2000}
text=${CROWDTRAIN_SHAKESPEARE:-$here/../../shared/data/tinyshakespeare.txt}
[ -f "$text" ] || { echo "$0: missing input $text (set CROWDTRAIN_SHAKESPEARE)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$build/bin/crowdtrain-prepare" "$text" --out "$work/data" --tokenizer char --val-fraction 0.1 >/dev/null

common=(--n-layer 4 --n-head 4 --n-embd 128 --block-size 64 --batch-size 12 --max-iters "$iters"
        --learning-rate 1e-3 --min-lr 1e-4 --warmup-iters 100 --lr-decay-iters 2000
        --beta1 0.9 --beta2 0.99 --weight-decay 0.1 --grad-clip 1.0 --eval-iters 200)

ours=$("$build/bin/crowdtrain-train" --data "$work/data" "${common[@]}" --dropout 0 --eval-interval 0 \
       --device cpu --log-interval 1000000 | tail -n 1)
if [ "${TORCH_REFERENCE:-pypi}" = debian ]; then
    ref=$(/usr/bin/python3 "$here/train_reference.py" --text "$text" "${common[@]}" | tail -n 1)
else
    venv_env=$("$here/torch_venv.sh")
    ref=$(env $venv_env sh -c '"$PYTHON" "$0" "$@"' "$here/train_reference.py" --text "$text" "${common[@]}" \
          | tail -n 1)
fi

/usr/bin/python3 - "$ours" "$ref" <<'PY'
import json, sys
ours, ref = json.loads(sys.argv[1]), json.loads(sys.argv[2])
ratio = ours["tokens_per_second"] / ref["tokens_per_second"]
print("| implementation | steps | val loss | train tokens/s |")
print("| --- | ---: | ---: | ---: |")
print(f"| crowdtrain-train (C++, libtorch) | {ours['steps']} | {ours['final_val_loss']:.4f} | {ours['tokens_per_second']:.0f} |")
print(f"| PyTorch {ref['torch']} eager (Python) | {ref['steps']} | {ref['final_val_loss']:.4f} | {ref['tokens_per_second']:.0f} |")
print(f"\nspeed ratio crowdtrain / PyTorch: {ratio:.2f}x; peak RSS crowdtrain {ours['peak_rss_bytes']/2**20:.0f} MiB")
PY
