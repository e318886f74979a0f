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
# HEARTBEAT_MS (1000), PERIOD_MS (the prober's, 50), PROBER_NICE (-10, as root),
# THREADS (per volunteer, 1; a list such as "2 1 1" gives volunteer i the
# i-th, cycling), CPUS (a list of CPU sets, one per volunteer, cycling:
# "0 1 1" runs volunteer 1 alone on CPU 0 and 2 and 3 on CPU 1, so that
# volunteer 1 is twice as fast and wraps the rounds up),
# OVERLAP=1 (the volunteers train the next round's task while a round
# closes: `--overlap`), SLOW_MS (the server names loop work of at least
# this many ms, 250),
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
for _ in $(seq 600); do [ -s "$work/server.out" ] || ! kill -0 "${pids[0]}" 2>/dev/null && break; sleep 0.5; done
[ -s "$work/server.out" ] || { echo "$0: the server did not start:" >&2; cat "$work/server.err" >&2; exit 1; }
field() { /usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$work/server.out" "$1"; }
key=$(field public_key); endpoint=$(field requests)
# The server's major page faults (pages read back from disk: code or files
# the kernel dropped under memory pressure; there is no swap here), and the
# state (R running or runnable, S sleeping, D in the kernel, e.g. reclaim),
# wait channel and scheduler counters (/proc/.../schedstat: time on a CPU
# and time runnable but waiting for one) of its loop (the main thread), and
# the state of ZeroMQ's I/O thread, sampled every 100 ms by one process
# (at nice 0: the loop's counters need no timely sample, and a sampler above
# the loop took its CPU) to set beside the slowest heartbeats.
server_pid=$(pgrep -P "${pids[0]}" -f "bin/crowdtrain-server" | head -n 1)
/usr/bin/python3 -c '
import glob, os, sys, time
pid, stop = sys.argv[1], sys.argv[2]
threads = open(sys.argv[3], "w")
def read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""
def after_name(stat):
    return stat.rpartition(")")[2].split()
def state(tid):
    return (after_name(read(f"/proc/{pid}/task/{tid}/stat")) or ["-"])[0] + ":" + (read(f"/proc/{pid}/task/{tid}/wchan") or "-")
def machine_ms():
    # The first line of /proc/stat: user nice system idle iowait irq softirq steal.
    cpu = [int(x) * 10.0 for x in read("/proc/stat").split("\n", 1)[0].split()[1:9]]
    return sum(cpu) - cpu[3] - cpu[4], cpu[5] + cpu[6], cpu[7]
io, watched, last, n = "", [], {}, 0
while not os.path.exists(stop) and os.path.exists(f"/proc/{pid}/stat"):
    if not io:
        io = next((c.split("/")[4] for c in glob.glob(f"/proc/{pid}/task/*/comm") if read(c).startswith("ZMQbg/IO")), "")
    if n % 10 == 0:  # the processes to watch, every second: all but the server and this sampler
        watched = [d for d in glob.glob("/proc/[0-9]*") if d != f"/proc/{pid}" and d != f"/proc/{os.getpid()}"]
    n += 1
    majflt = (after_name(read(f"/proc/{pid}/stat")) or ["0"] * 10)[9]
    run_ns, wait_ns = (read(f"/proc/{pid}/task/{pid}/schedstat").split() + ["0", "0"])[:2]
    io_state = state(io) if io else "-"
    now = time.time()
    print(f"{now:.3f} {majflt} {run_ns} {wait_ns} {state(pid)} {io_state}", flush=True)
    # Who had the CPUs since the last sample (ms): each server thread (the
    # loop is "loop"), every other process (ours, the threads of the kernel,
    # those of the machine), this sampler, the interrupts and the time the
    # hypervisor gave to other machines (steal), each with its nice value;
    # "others" is what none of them accounts for (processes that came and
    # went between two looks at /proc).
    used = {}
    for task in glob.glob(f"/proc/{pid}/task/*"):
        rest, ran = after_name(read(f"{task}/stat")), read(f"{task}/schedstat").split()
        tid = task.rpartition("/")[2]
        if len(rest) > 16 and ran:
            name = "loop" if tid == pid else "server:" + read(f"{task}/comm").replace(" ", "_")
            used[name + "/" + tid] = (rest[16], int(ran[0]) / 1e6)
    for proc in watched + ["/proc/self"]:
        rest = after_name(read(f"{proc}/stat"))
        comm = read(f"{proc}/comm").replace(" ", "_")
        if not comm.startswith("crowdtrain") or proc == "/proc/self":
            if len(rest) > 16:
                name = "sampler" if proc == "/proc/self" else comm
                used[name + "/" + proc[6:]] = (rest[16], (int(rest[11]) + int(rest[12])) * 10.0)
            continue
        # Our processes thread by thread: a thread may run at its own nice.
        for task in glob.glob(f"{proc}/task/*"):
            rest, ran = after_name(read(f"{task}/stat")), read(f"{task}/schedstat").split()
            thread = read(f"{task}/comm").replace(" ", "_")
            if len(rest) > 16 and ran:
                name = comm if thread == comm else f"{comm}[{thread}]"
                used[name + "/" + task.rpartition("/")[2]] = (rest[16], int(ran[0]) / 1e6)
    total, interrupts, steal = machine_ms()
    used["machine/all"], used["interrupts/all"], used["steal/all"] = ("-", total), ("-", interrupts), ("-", steal)
    delta = {k: ms - last[k] for k, (_, ms) in used.items() if k in last}
    delta["others/all"] = delta.get("machine/all", 0) - sum(v for k, v in delta.items() if k != "machine/all")
    busy = [f"{k}:{used[k][0] if k in used else chr(45)}:{v:.0f}" for k, v in delta.items() if v >= 1 and k != "machine/all"]
    last = {k: ms for k, (_, ms) in used.items()}
    running = next((l.split()[1] for l in read("/proc/stat").splitlines() if l.startswith("procs_running")), "0")
    threads.write(f"{now:.3f} {running} " + " ".join(busy) + "\n")
    threads.flush()
    time.sleep(0.1)
' "$server_pid" "$work/stop" "$work/threads.log" > "$work/majflt.log" 2>/dev/null &

# The prober is the instrument: it runs before the volunteers (nice -10, as
# root) so that its own waits for a core are not counted as the loop's.
prober_nice=()
[ "$(id -u)" = 0 ] && prober_nice=(nice -n "${PROBER_NICE:--10}")
"${prober_nice[@]}" "$build/bin/bench_close_prober" "$endpoint" gpt2 "$key" "$work/stop" "${PERIOD_MS:-50}" \
    > "$work/prober.json" 2> "$work/prober.err" &
prober=$!
start=$(date +%s)
workers=()
read -r -a threads_each <<< "${THREADS:-1}"
read -r -a cpus_each <<< "${CPUS:-}"
overlap=()
[ -z "${OVERLAP:-}" ] || overlap=(--overlap)
for i in $(seq "$volunteers"); do
    pinned=()
    [ "${#cpus_each[@]}" = 0 ] || pinned=(taskset -c "${cpus_each[$(( (i - 1) % ${#cpus_each[@]} ))]}")
    "${pinned[@]}" /usr/bin/time -v "$build/bin/crowdtrain-worker" join "$endpoint" gpt2 --server-key "$key" --data "$work/data" \
        --data-dir "$work/v$i" --name "v$i" --threads "${threads_each[$(( (i - 1) % ${#threads_each[@]} ))]}" --max-rounds "$rounds" "${overlap[@]}" \
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

echo "GPT-2 project: preset ${PRESET:-gpt2}, block $block, batch $batch, H $H, $codec, $volunteers volunteers${OVERLAP:+ with --overlap}, $rounds rounds, ${seconds} s"
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
samples = [(float(r[0]), float(r[1]), int(r[2]), int(r[3]), r[4:]) for r in rows if len(r) >= 5]
def faults(a, b):
    inside = [f for t, f, *_ in samples if a <= t <= b]
    before = [f for t, f, *_ in samples if t < a]
    return int(max(inside) - before[-1]) if inside and before else 0
def states(a, b):
    return ' '.join('/'.join(s) for t, *_, s in samples if a <= t <= b) or '-'
def scheduler(a, b):
    # The loop's time on a CPU and waiting for one, from the last sample
    # before the heartbeat to the first after its reply.
    before = [x for x in samples if x[0] <= a]
    after = [x for x in samples if x[0] >= b]
    if not before or not after:
        return '-'
    x, y = before[-1], after[0]
    return f'on a CPU {(y[2] - x[2]) / 1e6:.0f} ms, runnable {(y[3] - x[3]) / 1e6:.0f} ms of {(y[0] - x[0]) * 1e3:.0f} ms'
if len(samples) > 1:
    print(f'The server\'s major page faults: {int(samples[-1][1] - samples[0][1])} in all; around each of the slowest heartbeats:',
          ', '.join(f'{ms:.0f} ms: {faults(at - 0.1, at + ms / 1000 + 0.1)}' for ms, at in p['slowest']))
    print('The loop\'s and ZeroMQ I/O thread\'s state:wait channel during each (every 100 ms), and the loop\'s scheduling around it:')
    for ms, at in p['slowest']:
        print(f'    {ms:.0f} ms at {at - float(sys.argv[2]):.1f} s: {states(at, at + ms / 1000)}; {scheduler(at, at + ms / 1000)}')
    # Who had the CPUs meanwhile (name/pid:nice, ms on a CPU; the server's threads by name).
    busy = []
    for line in open(sys.argv[4]):
        t, running, *entries = line.split()
        busy.append((float(t), int(running), [e.rsplit(':', 2) for e in entries]))
    print('Who had the CPUs during each (ms on a CPU, at nice; runnable tasks at most):')
    for ms, at in p['slowest']:
        inside = [b for b in busy if at <= b[0] <= at + ms / 1000 + 0.1]
        use = {}
        for _, _, entries in inside:
            for name, nice, used in entries:
                base = name.rsplit(chr(47), 1)[0]
                key = f'{base} (nice {nice})'
                use[key] = use.get(key, 0) + float(used)
        top = sorted(use.items(), key=lambda kv: -kv[1])[:8]
        print(f'    {ms:.0f} ms at {at - float(sys.argv[2]):.1f} s: runnable {max((b[1] for b in inside), default=0)};',
              ', '.join(f'{k} {v:.0f}' for k, v in top) or '-')
    seen = {}
    for *_, s in samples:
        for x in s[:1]:
            seen[x.split(':')[0]] = seen.get(x.split(':')[0], 0) + 1
    print('The loop\'s states over the run:', seen)" \
    "$work/prober.json" "$t0" "$work/majflt.log" "$work/threads.log"
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
echo "Tasks taken back in a wrap-up from holders that sent nothing (their work lost):"
grep "wraps up without task" "$work/server.err" | relative || echo "    none"
echo "The loop's work of ${SLOW_MS:-250} ms or more (core/slow_work.h):"
grep "the loop was busy" "$work/server.err" | relative || echo "    none"
read -r reclaim0 compact0 <<< "$vmstat_start"; read -r reclaim1 compact1 <<< "$vmstat_end"
echo "The machine during the run (/proc/vmstat): $((reclaim1 - reclaim0)) direct-reclaim stalls, $((compact1 - compact0)) compaction stalls"
echo "Server peak RSS: $(awk '/Maximum resident set size/ {print int($NF/1024)}' "$work/server.err") MB"
echo
echo "State folder after $rounds rounds: $(du -sb "$work/state/gpt2" | cut -f1) bytes"
( cd "$work/state/gpt2" && find . -type f -printf '%s %p\n' | sort -k2 | grep -v '^[0-9]* ./data' | sed 's/^/    /' )
