#!/usr/bin/env bash
# One volunteer's memory on one real GPT-2 task (issue 41, item 3): a local
# coordinator with a GPT-2 project (GPT-2 BPE on Tiny Shakespeare, `preset:
# gpt2`), one crowdtrain-worker that trains one task of H inner steps and
# submits it. Prints the peak RSS (VmHWM) of the volunteer's two processes,
# the daemon side (crowdtrain-worker join, which runs crowdtrain-daemon) and its training
# core (crowdtrain-core), in MB and in bytes per parameter, and the
# worker's "Maximum resident set size" from /usr/bin/time -v (the larger of
# the two: the core is its child). VmHWM is polled every 20 ms; it only
# grows, so the last reading is the peak up to 20 ms before the exit. The
# tree's figure is the largest sum of the two's current RSS seen by the
# same polls (what the volunteer's machine holds at once).
#
#   bench/volunteer_memory.sh [BUILD_DIR]
#
# Needs crowdtrain-server crowdtrain-worker crowdtrain-core crowdtrain-prepare
# built in BUILD_DIR (default build/ci). The coordinator of a 124M project
# takes a few GB besides: run under `flock /tmp/crowdtrain-bench.lock`.
# H (inner steps, default 2), BATCH (2), BLOCK (128), CODEC (sparse|int8,
# default sparse), PRESET (gpt2), THREADS (the volunteer's, 1), KEEP_WORK=1.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build/ci}
H=${H:-2}; batch=${BATCH:-2}; block=${BLOCK:-128}
codec=${CODEC:-sparse}
text=${CROWDTRAIN_SHAKESPEARE:-$here/../../shared/data/tinyshakespeare.txt}
gpt2=${CROWDTRAIN_GPT2_DIR:-$here/../../shared/data/gpt2}
[ -f "$text" ] || { echo "$0: missing input $text" >&2; exit 1; }
work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do pkill -KILL -P "$p" 2>/dev/null || true; done
    if [ -n "${KEEP_WORK:-}" ]; then echo "work: $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT

"$build/bin/crowdtrain-prepare" "$text" --out "$work/data" --tokenizer gpt2 --gpt2-dir "$gpt2" \
    --val-fraction 0.1 >/dev/null 2>&1
if [ "$codec" = sparse ]; then
    codec_json='"codec": "sparse", "outer": {"lr": 4.0, "momentum": 0},'
else
    codec_json='"codec": "int8",'
fi
cat > "$work/spec.json" <<JSON
{"name": "gpt2", "model": {"preset": "${PRESET:-gpt2}", "block_size": $block},
 "data": "$work/data", "init": {"seed": 1},
 "inner": {"steps": $H, "batch_size": $batch, "learning_rate": 3e-4, "min_lr": 3e-5, "warmup_iters": 2,
           "beta1": 0.9, "beta2": 0.95, "weight_decay": 0.1, "grad_clip": 1.0},
 "round": {"token_target": $((H * batch * block)), "deadline_seconds": 3600},
 $codec_json
 "checkpoints": {"every_rounds": 100, "keep_last": 1},
 "validation": {"batches": 1, "batch_size": 1}}
JSON
"$build/bin/crowdtrain-server" "$work/spec.json" --state "$work/state" \
    --bind 'tcp://127.0.0.1:*' --publish 'tcp://127.0.0.1:*' --threads 1 \
    > "$work/server.out" 2> "$work/server.err" &
pids+=($!)
server=$!
for _ in $(seq 600); do [ -s "$work/server.out" ] && break; sleep 0.5; done
[ -s "$work/server.out" ] || { echo "$0: the server did not start:" >&2; cat "$work/server.err" >&2; exit 1; }
field() { /usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$work/server.out" "$1"; }
key=$(field public_key); endpoint=$(field requests)

start=$(date +%s)
/usr/bin/time -v "$build/bin/crowdtrain-worker" join "$endpoint" gpt2 --server-key "$key" --data "$work/data" \
    --data-dir "$work/v1" --name v1 --threads "${THREADS:-1}" --max-tasks 1 \
    > /dev/null 2> "$work/v1.log" &
timer=$!; pids+=($!)
# "HWM RSS" of a live process, in bytes (nothing once it is gone).
mem() { awk '/^VmHWM:/ {h = $2} /^VmRSS:/ {r = $2} END {if (h) print h * 1024, r * 1024}' OFMT=%.0f CONVFMT=%.0f "/proc/$1/status" 2>/dev/null || true; }
worker=""; core=""; worker_peak=0; core_peak=0; tree_peak=0
while kill -0 "$timer" 2>/dev/null; do
    [ -n "$worker" ] || worker=$(pgrep -P "$timer" || true)
    if [ -n "$worker" ]; then
        [ -n "$core" ] || core=$(pgrep -P "$worker" -x crowdtrain-core || true)
        read -r wh wr <<< "$(mem "$worker")" || true
        cr=0
        if [ -n "$core" ]; then read -r ch cr <<< "$(mem "$core")" || true; [ -n "${ch:-}" ] && core_peak=$ch; fi
        if [ -n "${wh:-}" ]; then
            worker_peak=$wh
            [ $((wr + ${cr:-0})) -gt "$tree_peak" ] && tree_peak=$((wr + ${cr:-0}))
        fi
    fi
    sleep 0.02
done
wait "$timer" || { echo "$0: the worker failed:" >&2; tail -20 "$work/v1.log" >&2; exit 1; }
seconds=$(( $(date +%s) - start ))
kill -TERM "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true
grep -q "accepted" "$work/v1.log" || { echo "$0: the task was not accepted:" >&2; tail -20 "$work/v1.log" >&2; exit 1; }

# P of `preset: gpt2` at block 128 (docs/architecture.md); ELEMENTS for another model.
P=${ELEMENTS:-123751680}
timed=$(awk '/Maximum resident set size/ {print $6 * 1024}' "$work/v1.log")
row() { awk -v b="$2" -v p="$P" -v name="$1" 'BEGIN { printf "| %s | %.0f | %.1f |\n", name, b / 1e6, b / p }'; }
echo "Volunteer memory: preset ${PRESET:-gpt2} (P = $P), block $block, batch $batch, H $H, $codec, ${THREADS:-1} thread(s), ${seconds} s"
echo
echo "| process | peak RSS (MB) | B/P |"
echo "|---|---:|---:|"
row "daemon side (crowdtrain-worker join)" "$worker_peak"
row "training core (crowdtrain-core)" "$core_peak"
row "/usr/bin/time -v on the worker" "$timed"
row "the two together (largest sampled sum of RSS)" "$tree_peak"
