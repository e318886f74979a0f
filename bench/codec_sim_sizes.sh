#!/usr/bin/env bash
# Does the sparse codec's gap to synchronous training grow with the model?
# Runs bench/codec_sim.py (the in-process model of the swarm) for one model
# size: synchronous, int8 DiLoCo and the sparse codec at k 64 and k 160 (the
# product's defaults otherwise), all at once as separate processes, and
# prints one row per run, read at the last round every run reached.
#
#   bench/codec_sim_sizes.sh TEXT OUT_DIR small|big [DEVICE] [SEEDS] [SECONDS]
#
# small: 2 layers x 64 (108,352 parameters, the swarm bench's model), inner
# lr 3e-3; big: 6 layers x 384 (10,697,088), inner lr 1e-3 (nanoGPT's for
# that model). Both: 4 volunteers, 60 rounds, H = 100, batch 8 x 64 tokens,
# cosine to a tenth. SEEDS (default "1337"): the seeds of the sync and sparse
# runs (int8 runs the first only). SECONDS (default none): a time limit per
# run; a run cut short still reports every tenth round it reached.
set -uo pipefail
text=$1 out=$2 size=$3 device=${4:-cpu} seeds=${5:-1337} limit=${6:-}
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-python3}
mkdir -p "$out"
case $size in
    small) model="--layers 2 --heads 2 --embd 64 --lr 3e-3 --min-lr 3e-4" ;;
    big) model="--layers 6 --heads 6 --embd 384 --lr 1e-3 --min-lr 1e-4" ;;
    *) echo "$0: size is small or big" >&2; exit 2 ;;
esac
common="--text $text --device $device --rounds 60 --H 100 --index-coding ef $model"
sparse="--codec sparse --decay 0.8 --outer-lr 4 --outer-momentum 0 --update-bits 4"
int8="--codec int8 --outer-lr 0.7 --outer-momentum 0.8"
first=${seeds%% *}
runs=("int8 $first|$int8 --seed $first")
for s in $seeds; do
    runs+=("sync $s|--sync 1 --seed $s" "sparse-k64 $s|$sparse --k 64 --seed $s" "sparse-k160 $s|$sparse --k 160 --seed $s")
done
pids=()
for run in "${runs[@]}"; do
    name=${run%%|*} args=${run#*|}
    log="$out/$size-${name// /-}.log"
    # shellcheck disable=SC2086 # the argument strings are word lists
    ${limit:+timeout "$limit"} "$python" "$here/codec_sim.py" $common $args > "$log" 2>&1 &
    pids+=($!)
done
wait "${pids[@]}"
# One row per run: its validation loss at each tenth round it reached.
"$python" - "$out" "$size" <<'PY'
import glob, json, os, sys
out, size = sys.argv[1:]
print(f"| {size} run | seed | val loss by round (10, 20, ...) | final | up / down bytes a round | seconds |")
print("|---|---|---|---|---|---|")
for path in sorted(glob.glob(os.path.join(out, size + "-*.log"))):
    name = os.path.basename(path)[len(size) + 1:-4]
    kind, seed = name.rsplit("-", 1)
    curve, final, sizes, seconds = [], "", "", ""
    for line in open(path):
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if "round" in d:
            curve.append(f"{d['val']:.4f}")
        elif "sync" in d:
            final, seconds = f"{d['val']:.4f}", f"{d['seconds']:.0f}"
            curve.append(final)
        elif "history" in d:
            final, seconds = f"{d['val']:.4f}", f"{d['seconds']:.0f}"
            sizes = f"{d['up_bytes_per_round']:.0f} / {d['down_bytes_per_round']:.0f}"
    print(f"| {kind} | {seed} | {' '.join(curve)} | {final or '(cut short)'} | {sizes} | {seconds} |")
PY
