#!/usr/bin/env bash
# A real GPT-2 project on loopback, as a host runs one (issue 41): GPT-2 BPE
# on Tiny Shakespeare, `preset: gpt2` (124M), V crowdtrain-worker volunteers,
# R rounds, a checkpoint every round; beside them bench_close_prober
# heartbeats every 50 ms and records the loop's longest unanswered interval
# (the round closes run off the loop: it should stay under 100 ms). Prints a
# table: the prober's figures, the volunteers' reconnects, the server's
# per-round log lines (close duration, bytes written), and the state
# folder's size against the bound in docs/architecture.md.
#
#   bench/gpt2_project.sh [BUILD_DIR] [ROUNDS] [VOLUNTEERS]
#
# Needs the targets crowdtrain-server crowdtrain-worker crowdtrain-daemon
# crowdtrain-prepare bench_close_prober built in BUILD_DIR (default build/ci).
#
# H (inner steps, default 4), BATCH (2), BLOCK (128), CODEC (sparse|int8,
# default sparse), PRESET (gpt2), CHECKPOINT_EVERY (1), KEEP_LAST (3),
# HEARTBEAT_MS (1000), PERIOD_MS (the prober's, 50), PROBER_NICE (-10, as root), THREADS (per volunteer, 1),
# SLOW_MS (the server names loop work of at least this many ms, 250),
# KEEP_WORK=1 keeps the work folder.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build/ci}
rounds=${2:-5}
volunteers=${3:-3}
H=${H:-4}; batch=${BATCH:-2}; block=${BLOCK:-128}
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
 "round": {"token_target": $((volunteers * H * batch * block)), "deadline_seconds": 3600},
 $codec_json
 "checkpoints": {"every_rounds": ${CHECKPOINT_EVERY:-1}, "keep_last": ${KEEP_LAST:-3}},
 "validation": {"batches": 4, "batch_size": 4}}
JSON
# The kernel's direct reclaim and compaction stall whichever thread
# allocates, the loop's included: counted over the run.
vmstat_now() { awk '/^(allocstall_(normal|movable)|compact_stall) / {s[$1 ~ /compact/] += $2} END {print s[0], s[1]}' /proc/vmstat; }
vmstat_start=$(vmstat_now)
t0=$(date +%s.%N) # the times printed below count from here
CROWDTRAIN_SLOW_WORK_MS=${SLOW_MS:-250} /usr/bin/time -v "$build/bin/crowdtrain-server" "$work/spec.json" --state "$work/state" \
    --bind 'tcp://127.0.0.1:*' --publish 'tcp://127.0.0.1:*' --heartbeat-ms "${HEARTBEAT_MS:-1000}" --threads 1 \
    > "$work/server.out" 2> >(/usr/bin/python3 -u -c '
import sys, time
for line in sys.stdin:
    sys.stdout.write(f"{time.time():.3f} {line}")' > "$work/server.err") &
pids+=($!)
for _ in $(seq 600); do [ -s "$work/server.out" ] && break; sleep 0.5; done
[ -s "$work/server.out" ] || { echo "$0: the server did not start:" >&2; cat "$work/server.err" >&2; exit 1; }
field() { /usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$work/server.out" "$1"; }
key=$(field public_key); endpoint=$(field requests)
# The server's major page faults (pages read back from disk: code or files
# the kernel dropped under memory pressure; there is no swap here), and the
# state (R running or runnable, S sleeping, D in the kernel, e.g. reclaim)
# and wait channel of its loop (the main thread) and of ZeroMQ's I/O
# thread, sampled every 100 ms, to set beside the slowest heartbeats.
server_pid=$(pgrep -P "${pids[0]}" -f "bin/crowdtrain-server" | head -n 1)
( io_tid=""
  state() { [ -n "$1" ] && echo "$(awk '{print $3}' "/proc/$server_pid/task/$1/stat" 2>/dev/null):$(cat "/proc/$server_pid/task/$1/wchan" 2>/dev/null)"; }
  while [ ! -e "$work/stop" ] && [ -r "/proc/$server_pid/stat" ]; do
      [ -n "$io_tid" ] || io_tid=$(grep -l "ZMQbg/IO" /proc/$server_pid/task/*/comm 2>/dev/null | head -n 1 | cut -d/ -f5)
      echo "$(date +%s.%N) $(awk '{print $12}' "/proc/$server_pid/stat" 2>/dev/null) $(state "$server_pid") $(state "$io_tid")"
      sleep 0.1
  done ) > "$work/majflt.log" 2>/dev/null &

# The prober is the instrument: it runs before the volunteers (nice -10, as
# root) so that its own waits for a core are not counted as the loop's.
prober_nice=()
[ "$(id -u)" = 0 ] && prober_nice=(nice -n "${PROBER_NICE:--10}")
"${prober_nice[@]}" "$build/bin/bench_close_prober" "$endpoint" gpt2 "$key" "$work/stop" "${PERIOD_MS:-50}" \
    > "$work/prober.json" 2> "$work/prober.err" &
prober=$!
start=$(date +%s)
workers=()
for i in $(seq "$volunteers"); do
    /usr/bin/time -v "$build/bin/crowdtrain-worker" join "$endpoint" gpt2 --server-key "$key" --data "$work/data" \
        --data-dir "$work/v$i" --name "v$i" --threads "${THREADS:-1}" --max-rounds "$rounds" \
        > /dev/null 2> "$work/v$i.log" &
    workers+=($!); pids+=($!)
done
last_round() {
    /usr/bin/python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('SELECT coalesce(max(round), 0) FROM rounds').fetchone()[0])" \
        "$work/state/gpt2/ledger.sqlite" 2>/dev/null || echo 0
}
until [ "$(last_round)" -ge "$rounds" ]; do
    sleep 5
    alive=0; for p in "${workers[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" = 1 ] || break
done
# The last round's evaluation and checkpoint.
for _ in $(seq 120); do grep -q "round $rounds closed" "$work/server.err" && break; sleep 1; done
touch "$work/stop"; wait "$prober" || true
for p in "${workers[@]}"; do wait "$p" 2>/dev/null || true; done
seconds=$(( $(date +%s) - start ))
# pids[0] is /usr/bin/time: stop the server under it (not the time-stamping
# reader, also its child), then time prints its figures.
pkill -TERM -P "${pids[0]}" -f "bin/crowdtrain-server" 2>/dev/null || true; wait "${pids[0]}" 2>/dev/null || true
# Its stderr passes through the time-stamping reader: wait for time's figures.
for _ in $(seq 50); do grep -q "Maximum resident set size" "$work/server.err" && break; sleep 0.2; done
vmstat_end=$(vmstat_now)

echo "GPT-2 project: preset ${PRESET:-gpt2}, block $block, batch $batch, H $H, $codec, $volunteers volunteers, $rounds rounds, ${seconds} s"
echo
echo "| loop: heartbeats | longest unanswered (ms) | p99 (ms) | longest between replies (ms) | failed |"
echo "|---|---|---|---|---|"
/usr/bin/python3 -c "
import json,sys; p=json.load(open(sys.argv[1]))
print(f\"| {p['heartbeats']} | {p['max_rtt_ms']:.1f} | {p['p99_rtt_ms']:.1f} | {p['max_gap_ms']:.1f} | {p['failed']} |\")
print()
print(f\"Heartbeats of 100 ms or more: {p['over_100_ms']}; the slowest (ms, s after the start):\",
      ', '.join(f'{ms:.0f} at {at - float(sys.argv[2]):.1f}' for ms, at in p['slowest']))
rows = [l.split() for l in open(sys.argv[3])]
samples = [(float(r[0]), float(r[1]), r[2:]) for r in rows if len(r) >= 2]
def faults(a, b):
    inside = [f for t, f, _ in samples if a <= t <= b]
    before = [f for t, f, _ in samples if t < a]
    return int(max(inside) - before[-1]) if inside and before else 0
def states(a, b):
    return ' '.join('/'.join(s) for t, _, s in samples if a <= t <= b) or '-'
if len(samples) > 1:
    print(f'The server\'s major page faults: {int(samples[-1][1] - samples[0][1])} in all; around each of the slowest heartbeats:',
          ', '.join(f'{ms:.0f} ms: {faults(at - 0.1, at + ms / 1000 + 0.1)}' for ms, at in p['slowest']))
    print('The loop\'s and ZeroMQ I/O thread\'s state:wait channel during each (every 100 ms):')
    for ms, at in p['slowest']:
        print(f'    {ms:.0f} ms at {at - float(sys.argv[2]):.1f} s: {states(at, at + ms / 1000)}')
    seen = {}
    for _, _, s in samples:
        for x in s[:1]:
            seen[x.split(':')[0]] = seen.get(x.split(':')[0], 0) + 1
    print('The loop\'s states over the run:', seen)" \
    "$work/prober.json" "$t0" "$work/majflt.log"
echo
echo "| volunteer | reconnects (\"lost the coordinator\") | peak RSS (MB) |"
echo "|---|---|---|"
for i in $(seq "$volunteers"); do
    lost=$(grep -c "lost the coordinator" "$work/v$i.log" || true)
    rss=$(awk '/Maximum resident set size/ {print int($6/1024)}' "$work/v$i.log")
    echo "| v$i | $lost | $rss |"
done
echo
echo "Server, one line a round:"
relative() { /usr/bin/python3 -c "
import sys
start = float(sys.argv[1])
for line in sys.stdin:
    at, _, rest = line.partition(' ')
    print(f'    {float(at) - start:7.1f} s  {rest}', end='')" "$t0"; }
grep " closed: " "$work/server.err" | relative
echo "The loop's work of ${SLOW_MS:-250} ms or more (core/slow_work.h):"
grep "the loop was busy" "$work/server.err" | relative || echo "    none"
read -r reclaim0 compact0 <<< "$vmstat_start"; read -r reclaim1 compact1 <<< "$vmstat_end"
echo "The machine during the run (/proc/vmstat): $((reclaim1 - reclaim0)) direct-reclaim stalls, $((compact1 - compact0)) compaction stalls"
echo "Server peak RSS: $(awk '/Maximum resident set size/ {print int($NF/1024)}' "$work/server.err") MB"
echo
echo "State folder after $rounds rounds: $(du -sb "$work/state/gpt2" | cut -f1) bytes"
( cd "$work/state/gpt2" && find . -type f -printf '%s %p\n' | sort -k2 | grep -v '^[0-9]* ./data' | sed 's/^/    /' )
