#!/usr/bin/env bash
# A DiLoCo swarm on emulated home links (docs/homelink.md): the coordinator
# and each volunteer in a network namespace of their own, joined by veth
# pairs shaped with tbf per direction, delay, jitter and loss added by
# bench/link_relay. Every link is scaled so that transfer time over compute
# time is what a GPU volunteer training GPT-2 124M would see.
#
#   sudo bench/homelink.sh [BUILD_DIR] PROFILE...
#
# One volunteer per PROFILE: cable, dsl, fibre, far; "mixed" stands for
# cable dsl fibre far. Settings (environment): ROUNDS (3), TASK_SECONDS (8:
# the bench's compute per task, which sets H), GPU_STEP_S (0.16), GPU_H (500),
# GPU_PARAMS (124439808), CODEC (int8, or sparse: outer SGD at the default lr, the
# union down-link), OVERLAP (1: workers train the next round's task while
# the link works, `--overlap`), LOCAL_DATA (1: volunteers read the prepared
# data from disk instead of fetching each task's over the link: the bench's
# tokens per task are not scaled to GPT-2's, see docs/homelink.md),
# HOST_MBIT (the coordinator's own link, each way, scaled as the volunteers'
# are; 0: unshaped), LATE (profiles of volunteers that join once round
# LATE_ROUND (1) has closed: theta_0 is then imported, so that every joiner
# downloads the full state, and a table shows the others' utilisation while
# it happens), SWARM (1: the state goes through the hub's swarm, volunteers
# sharing it over their own links; 0: in chunks from the hub only),
# KEEP_WORK (keep the folder).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build/ci}
shift || true
[ $# -gt 0 ] || set -- cable cable
profiles=()
for p in "$@"; do
    if [ "$p" = mixed ]; then profiles+=(cable dsl fibre far); else profiles+=("$p"); fi
done
trainers=${#profiles[@]}
late=()
for p in ${LATE:-}; do
    if [ "$p" = mixed ]; then late+=(cable dsl fibre far); else late+=("$p"); fi
done
late_round=${LATE_ROUND:-1}
profiles+=("${late[@]}")
volunteers=${#profiles[@]}
swarm_on=${SWARM:-1}
host_mbit=${HOST_MBIT:-0}
rounds=${ROUNDS:-3}
task_seconds=${TASK_SECONDS:-8}
gpu_step=${GPU_STEP_S:-0.16}
gpu_h=${GPU_H:-500}
gpu_params=${GPU_PARAMS:-124439808}
codec=${CODEC:-int8}
outer='"lr": 0.7, "momentum": 0.8, "nesterov": true'
[ "$codec" = sparse ] && outer='"momentum": 0'
overlap=()
[ "${OVERLAP:-0}" = 1 ] && overlap=(--overlap)
local_data=()
# 413k parameters on 4 x 64 tokens a step: the bench's task data over its
# pseudo-gradient comes out near GPT-2's (16 MB of tokens a task next to a
# 126 MB int8 pseudo-gradient), which a smaller model would not keep.
batch=4; block=64; layers=2; heads=4; embd=128
text=${CROWDTRAIN_SHAKESPEARE:-$here/../../shared/data/tinyshakespeare.txt}
py=/usr/bin/python3

# name: down Mbit/s, up Mbit/s, round trip ms, jitter ms (of the round trip), loss per packet
profile() {
    case $1 in
        cable) echo "50 10 30 3 0" ;;
        dsl) echo "16 2 50 5 0" ;;
        fibre) echo "300 100 10 1 0" ;;
        far) echo "50 20 150 15 0.005" ;;
        *) echo "homelink: unknown profile $1 (cable, dsl, fibre, far, mixed)" >&2; return 1 ;;
    esac
}
for p in "${profiles[@]}"; do profile "$p" >/dev/null || exit 1; done
[ -f "$text" ] || { echo "homelink: missing input $text (set CROWDTRAIN_SHAKESPEARE)" >&2; exit 1; }
for b in crowdtrain-server crowdtrain-worker crowdtrain-daemon crowdtrain-prepare crowdtrain-train link_relay; do
    [ -x "$build/bin/$b" ] || { echo "homelink: $build/bin/$b is missing (build it)" >&2; exit 1; }
done

. "$here/homelink_net.sh"
work=$(mktemp -d)
cleanup() {
    hl_cleanup_netns
    if [ -n "${KEEP_WORK:-}" ]; then echo "work: $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$build/bin/crowdtrain-prepare" "$text" --out "$work/data" --tokenizer char --val-fraction 0.1 >/dev/null 2>&1 \
    || { echo "homelink: crowdtrain-prepare failed" >&2; exit 1; }
[ "${LOCAL_DATA:-0}" = 1 ] && local_data=(--data "$work/data")

# The CPU's step time, with as many trainers at once as the swarm has.
calib=()
for i in $(seq "$volunteers"); do
    # With late joiners, theta_0 is imported (the first calibration run's
    # weights): no seed to build it from, so every joiner downloads the state.
    export_to=()
    [ "$i" = 1 ] && [ ${#late[@]} -gt 0 ] && export_to=(--export "$work/imported")
    "$build/bin/crowdtrain-train" --data "$work/data" --n-layer $layers --n-head $heads --n-embd $embd \
        --block-size $block --batch-size $batch --max-iters 60 --eval-interval 0 --eval-iters 1 --device cpu \
        --threads 1 --log-interval 1000000 "${export_to[@]}" > "$work/calib$i.json" 2>/dev/null &
    calib+=($!)
done
for pid in "${calib[@]}"; do wait "$pid"; done
cpu_step=$($py - "$work" "$volunteers" $batch $block <<'PY'
import json, sys
work, V, B, T = sys.argv[1], *map(int, sys.argv[2:])
tps = [json.loads(open(f"{work}/calib{i}.json").read().strip().splitlines()[-1])["tokens_per_second"] for i in range(1, V + 1)]
print(f"{sum(B * T / t for t in tps) / V:.5f}")
PY
) || { echo "homelink: the calibration run failed" >&2; exit 1; }
init='"seed": 1337'
[ ${#late[@]} -gt 0 ] && init="\"import\": \"$work/imported\""
P=$(( 65 * embd + block * embd + layers * (12 * embd * embd + 13 * embd) + 2 * embd ))
H=$($py -c "print(max(10, round($task_seconds / $cpu_step)))")
# tau: bench seconds per GPU second (a task's compute); beta: bench bytes per GPU byte.
read -r tau beta <<< "$($py -c "print($H * $cpu_step / ($gpu_h * $gpu_step), $P / $gpu_params)")"

cat > "$work/spec.json" <<JSON
{"name": "bench", "model": {"n_layer": $layers, "n_head": $heads, "n_embd": $embd, "block_size": $block, "vocab_size": 65},
 "data": "$work/data", "init": {$init},
 "inner": {"steps": $H, "batch_size": $batch, "learning_rate": 3e-3, "min_lr": 3e-4, "warmup_iters": 20,
           "lr_decay_iters": $((rounds * H)), "beta1": 0.9, "beta2": 0.99, "weight_decay": 0.1, "grad_clip": 1.0},
 "outer": {$outer},
 "round": {"token_target": $((volunteers * H * batch * block)), "deadline_seconds": 3600},
 "codec": "$codec", "checkpoints": {"every_rounds": 1000, "keep_last": 1},
 "validation": {"batches": 4, "batch_size": 16}}
JSON

# The bench's payloads move in fewer, relatively larger chunks than GPT-2's
# (chunk_bytes is 1 MiB either way), and a chunk must arrive within the
# volunteer's transfer timeout (2 x heartbeat x liveness) and the
# coordinator's liveness: a liveness long enough for the slowest chunk.
liveness=$($py - "$beta" "$tau" "$P" $(for p in "${profiles[@]}"; do profile "$p" | cut -d' ' -f1,2 | tr ' ' :; done) <<'PY'
import math, sys
beta, tau, P = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
worst = 0
for link in sys.argv[4:]:
    down, up = (float(r) * 1e6 * beta / tau / 8 for r in link.split(":"))
    worst = max(worst, 2**20 / down, min(2**20, P + 4 * math.ceil(P / 256)) / up)
print(max(3, math.ceil(1.5 * worst) + 3))
PY
)
hub="hl-hub-$$"; router="hl-r-$$"
hl_netns_add "$hub" && hl_netns_add "$router" || exit 1
host_kbit=$($py -c "print(round($host_mbit * 1000 * $beta / $tau))")
hl_uplink "$hub" "$router" "$host_kbit" || exit 1
req_port=5555; pub_port=5556; swarm_port=6881
server_swarm=(--swarm "0.0.0.0:$swarm_port"); worker_swarm=()
[ "$swarm_on" = 1 ] || { server_swarm=(--swarm off); worker_swarm=(--swarm-port off); }
ip netns exec "$hub" "$build/bin/crowdtrain-server" "$work/spec.json" --state "$work/state" \
    --bind "tcp://0.0.0.0:$req_port" --publish "tcp://0.0.0.0:$pub_port" --heartbeat-ms 1000 --liveness "$liveness" --threads 1 \
    "${server_swarm[@]}" > "$work/server.out" 2> "$work/server.err" &
server_pid=$!
for _ in $(seq 100); do [ -s "$work/server.out" ] && break; sleep 0.2; done
key=$($py -c "import json,sys; print(json.load(open(sys.argv[1]))['public_key'])" "$work/server.out") \
    || { echo "homelink: the coordinator did not start:" >&2; cat "$work/server.err" >&2; exit 1; }

echo "| volunteer | profile | down / up Mbit/s | RTT ms | loss | bench link: down / up kbit/s, RTT ms |" > "$work/links.md"
echo "| --- | --- | ---: | ---: | ---: | ---: |" >> "$work/links.md"
for i in $(seq "$volunteers"); do
    name=${profiles[$((i - 1))]}
    read -r down up rtt jitter loss <<< "$(profile "$name")"
    read -r down_k up_k delay_ms jitter_ms stall_ms <<< "$($py -c "
k = 1000 * $beta / $tau
print(max(8, round($down * k)), max(8, round($up * k)), $rtt * $tau / 2, $jitter * $tau / 2, $rtt * $tau)")"
    ns="hl-v$i-$$"
    hl_netns_add "$ns" && hl_link "$router" "$ns" "$i" "$down_k" "$up_k" && hl_route "$ns" "$i" || exit 1
    # The hub's ports (its swarm seed's too) through the delay relay; other
    # volunteers directly through the router (shaped, not delayed).
    ip netns exec "$ns" "$build/bin/link_relay" relay --forward "$req_port:10.77.0.1:$req_port" \
        --forward "$pub_port:10.77.0.1:$pub_port" --forward "$swarm_port:10.77.0.1:$swarm_port" --delay-ms "$delay_ms" --jitter-ms "$jitter_ms" --loss "$loss" \
        --loss-unit-bytes "$($py -c "print(1448 * $beta)")" --stall-ms "$stall_ms" --seed "$i" > "$work/relay$i.out" 2> "$work/relay$i.err" &
    printf "| v%d | %s | %s / %s | %s | %s | %s / %s, %.2f |\n" "$i" "$name" "$down" "$up" "$rtt" "$loss" "$down_k" "$up_k" \
        "$($py -c "print(2 * $delay_ms)")" >> "$work/links.md"
done
for i in $(seq "$volunteers"); do
    for _ in $(seq 50); do [ -s "$work/relay$i.out" ] && break; sleep 0.1; done
done

start=$(date +%s.%N)
pids=()
volunteer() { # INDEX ROUNDS
    ip netns exec "hl-v$1-$$" timeout 3000 "$build/bin/crowdtrain-worker" join "tcp://127.0.0.1:$req_port" bench \
        --server-key "$key" --data-dir "$work/v$1" --name "v$1" --threads 1 --max-rounds "$2" "${overlap[@]}" "${local_data[@]}" \
        "${worker_swarm[@]}" > "$work/v$1.json" 2> "$work/v$1.log" &
    pids+=($!)
}
for i in $(seq "$trainers"); do volunteer "$i" "$rounds"; done
late_ms=0
if [ ${#late[@]} -gt 0 ]; then
    version=0
    while (( version < late_round )); do
        sleep 0.5
        version=$($py -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('SELECT coalesce(max(version),0) FROM rounds').fetchone()[0])" \
            "$work/state/bench/ledger.sqlite" 2>/dev/null || echo 0)
    done
    (( version < rounds )) || { echo "homelink: round $late_round closed after the last (raise ROUNDS)" >&2; exit 1; }
    late_ms=$($py -c "import time; print(int(time.time() * 1000))")
    for i in $(seq $((trainers + 1)) "$volunteers"); do volunteer "$i" $((rounds - version)); done
fi
for pid in "${pids[@]}"; do wait "$pid" || true; done
swarm_seconds=$(echo "$(date +%s.%N) - $start" | bc)
kill -INT "$server_pid" 2>/dev/null
wait "$server_pid" 2>/dev/null

echo "GPU stand-in: GPT-2 124M, $gpu_params parameters, $gpu_step s per 16k-token step, H = $gpu_h; codec $codec; overlap ${OVERLAP:-0}; task data ${LOCAL_DATA:+local, not on the link}"
echo "bench: $P parameters, H = $H, CPU step ${cpu_step} s (calibration, $volunteers at once);" \
     "tau = $(printf %.4f "$tau") bench s per GPU s, beta = $(printf %.3g "$beta") bench bytes per GPU byte;" \
     "liveness $liveness heartbeats of 1 s"
$py -c "
gpu = 2 * $gpu_h * 16384 / ($gpu_params * (1 + 4 / 256))
bench = 2 * $H * $batch * $block / ($P * (1 + 4 / 256))
print(f'task data / int8 pseudo-gradient bytes: GPU {gpu:.3f}, bench {bench:.3f}')"
echo
cat "$work/links.md"
echo
$py - "$work" "$tau" "$swarm_seconds" "$((batch * block))" "$($py -c "print($gpu_h * $gpu_step)")" "$H" "${profiles[@]}" <<'PY'
import json, sqlite3, sys
work, tau, swarm, step_tokens = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
gpu_task, H = float(sys.argv[5]), int(sys.argv[6])
profiles = sys.argv[7:]
rows = sqlite3.connect(f"{work}/state/bench/ledger.sqlite").execute(
    "SELECT round, closed_at_ms FROM rounds ORDER BY round").fetchall()
closes = [t for r, t in rows if t and r >= 1]  # round 0 is the project's creation
gaps = [(b - a) / 1e3 for a, b in zip(closes, closes[1:])]
round_s = sum(gaps) / len(gaps) if gaps else float("nan")
print("| volunteer | profile | tasks | accepted | step s | compute s | wall s | utilisation | steady | per round | GPU volunteer | GPU, steady | MB sent | MB received | requests / task | heartbeats / task | data requests / task |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for i, name in enumerate(profiles, 1):
    try:
        s = json.loads(open(f"{work}/v{i}.json").read().strip().splitlines()[-1])
    except Exception:
        print(f"| v{i} | {name} | (no summary: see v{i}.log) |")
        continue
    tasks = max(1, s["tasks"])
    steps = s["tokens"] / step_tokens
    step = f"{s['compute_s'] / steps:.4f}" if steps else "-"
    per_task = s["compute_s"] / tasks
    # The GPU volunteer's compute for the same steps (a bench task of H
    # steps stands for one of gpu_task seconds) against the bench's wall
    # time outside compute, in GPU seconds.
    gpu_compute = steps / H * gpu_task
    gpu = f"{gpu_compute / (gpu_compute + (s['wall_s'] - s['compute_s']) / tau):.3f}" if steps else "-"
    # Steady: from the first task on (joining and the first full-state
    # download, once per volunteer, left out).
    busy = s["wall_s"] - s.get("first_task_s", 0)
    steady = f"{s['compute_s'] / busy:.3f}" if busy > 0 else "-"
    gpu_steady = f"{gpu_compute / (gpu_compute + (busy - s['compute_s']) / tau):.3f}" if steps and busy > 0 else "-"
    print(f"| v{i} | {name} | {s['tasks']} | {s['accepted']} | {step} | {s['compute_s']:.1f} | {s['wall_s']:.1f} | "
          f"{s['compute_s'] / s['wall_s']:.3f} | {steady} | {per_task / round_s:.3f} | {gpu} | {gpu_steady} | "
          f"{s['bytes_sent'] / 1e6:.3f} | {s['bytes_received'] / 1e6:.3f} | "
          f"{(s.get('requests', 0) - s.get('heartbeats', 0)) / tasks:.1f} | {s.get('heartbeats', 0) / tasks:.1f} | "
          f"{s.get('data_requests', 0) / tasks:.1f} |")
print(f"\nround time: {round_s:.1f} s on the bench (mean of {len(gaps)} rounds), "
      f"{round_s / tau:.0f} s for the GPU volunteer it stands for; swarm wall {swarm:.0f} s")
PY
# Chunk counts do not scale with beta (the bench's payloads fit one 1 MiB
# chunk): what GPT-2's stop-and-wait chunks would add a round, per profile.
$py - "$gpu_params" "$gpu_h" "$codec" "${profiles[@]}" <<'PY'
import math, sys
P, H, codec = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
names = sys.argv[4:]
rtts = {"cable": 30, "dsl": 50, "fibre": 10, "far": 150}
if codec == "sparse":
    # k 64 of 4096: 0.01955 bytes per element up (docs/protocol.md §7); the
    # union update holds at most every volunteer's entries at ~1.3 bytes each
    # (int4 values, the default update_bits: ~6 bits of index, 4 of value).
    up = math.ceil(0.01955 * P / 2**20)
    down = math.ceil(len(names) * 0.0156 * P * 1.3 / 2**20)
else:
    up = down = math.ceil((P + 4 * math.ceil(P / 256)) / 2**20)
data = math.ceil(2 * H * 16384 / 2**20)
trips = up + down + data + 8  # upload chunks, update fetches, task data; get_task, submit, describes, join slack
for name in dict.fromkeys(names):
    print(f"GPT-2 on {name}: about {trips} round trips a task ({up} upload chunks, at most {down} update chunks, "
          f"{data} data chunks), {trips * rtts[name] / 1e3:.1f} s of waiting at {rtts[name]} ms not on the bench")
PY
[ ${#late[@]} -gt 0 ] || exit 0
# The late joiners: how long until each trained, where its state came from;
# the others' utilisation before they came and while they downloaded.
echo
$py - "$work" "$tau" "$late_ms" "$trainers" "$((batch * block))" "$($py -c "print($gpu_h * $gpu_step)")" "$H" "$P" "$swarm_on" "$host_mbit" "${profiles[@]}" <<'PY'
import datetime, json, re, sqlite3, sys
work, tau, late_ms, trainers, step_tokens, gpu_task, H, P, swarm_on, host_mbit = (
    sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6]),
    int(sys.argv[7]), int(sys.argv[8]), sys.argv[9] == "1", sys.argv[10])
profiles = sys.argv[11:]
db = sqlite3.connect(f"{work}/state/bench/ledger.sqlite")
done_ms = late_ms
print(f"late joiners (swarm {'on' if swarm_on else 'off'}, host link {host_mbit} Mbit/s or unshaped if 0; "
      f"the state is {4 * P / 1e6:.2f} MB, standing for {4 * P / 1e6 / (P / 124439808):.0f} MB):\n")
day = datetime.datetime.fromtimestamp(late_ms / 1e3).date()
def log_ms(log, text):
    # The agent's log lines start with the local time of day.
    m = re.search(r"^(\d\d):(\d\d):(\d\d) .*" + re.escape(text), log, re.M)
    if not m:
        return None
    t = datetime.datetime.combine(day, datetime.time(*map(int, m.groups())))
    return int(t.timestamp() * 1000)
print("| volunteer | profile | state: bench s | GPU s | first task: bench s | GPU s | state from | from peers MB | from the hub MB |")
print("| --- | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: |")
for i in range(trainers + 1, len(profiles) + 1):
    try:
        s = json.loads(open(f"{work}/v{i}.json").read().strip().splitlines()[-1])
    except Exception:
        print(f"| v{i} | {profiles[i - 1]} | (no summary: see v{i}.log) |")
        continue
    log = open(f"{work}/v{i}.log", errors="replace").read()
    first = s.get("first_task_s", 0) if s.get("tasks", 0) else None
    state_ms = log_ms(log, "full state downloaded and verified")
    state_s = (state_ms - late_ms) / 1e3 if state_ms else None
    done_ms = max(done_ms, state_ms or late_ms)
    m = re.findall(r"the state from the swarm, (\d+) bytes from peers and (\d+) from the hub", log)
    source = "swarm" if m else ("chunks" if "full state downloaded" in log else "-")
    peers, hub = (int(m[-1][0]) / 1e6, int(m[-1][1]) / 1e6) if m else (0, 0)
    cells = [f"{x:.0f} | {x / tau:.0f}" if x is not None else "- | -" for x in (state_s, first)]
    print(f"| v{i} | {profiles[i - 1]} | {cells[0]} | {cells[1]} | {source} | {peers:.2f} | {hub:.2f} |")
print("\n| volunteer | profile | tasks before | GPU utilisation before | tasks while the joiners download the state | GPU utilisation then |")
print("| --- | --- | ---: | ---: | ---: | ---: |")
for i in range(1, trainers + 1):
    rows = db.execute("SELECT c.submitted_at_ms, c.compute_ms, c.tokens FROM contributions c JOIN volunteers v "
                      "ON v.public_key = c.public_key WHERE v.display_name = ? ORDER BY c.submitted_at_ms",
                      (f"v{i}",)).fetchall()
    def window(lo, hi):
        # Tasks submitted in (lo, hi]; both ends at submissions.
        tasks = [r for r in rows if lo < r[0] <= hi]
        if not tasks:
            return 0, "-"
        wall = (hi - lo) / 1e3
        compute = sum(r[1] for r in tasks) / 1e3
        gpu = sum(r[2] for r in tasks) / step_tokens / H * gpu_task
        return len(tasks), f"{gpu / (gpu + max(0.0, wall - compute) / tau):.3f}"
    times = [r[0] for r in rows]
    a = max([t for t in times if t <= late_ms], default=None)
    b = min([t for t in times if t >= done_ms], default=None)
    before = window(times[0], a) if a is not None and times else (0, "-")
    during = window(a, b) if a is not None and b is not None else (0, "-")
    print(f"| v{i} | {profiles[i - 1]} | {before[0]} | {before[1]} | {during[0]} | {during[1]} |")
try:
    line = [l for l in open(f"{work}/server.err") if "bytes to the swarm" in l][-1]
    n = [int(x) for x in re.findall(r"(\d+)", line)[:3]]
    print(f"\nthe hub sent {n[0] / 1e6:.2f} MB to the swarm and {n[2] / 1e6:.2f} MB of states in chunks "
          f"({(n[0] + n[2]) / (4 * P):.2f} states in all, {len(profiles)} volunteers)")
except Exception:
    print("\n(no exit line from the hub: see server.err)")
PY
