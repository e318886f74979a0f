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
volunteers=${#profiles[@]}
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
    "$build/bin/crowdtrain-train" --data "$work/data" --n-layer $layers --n-head $heads --n-embd $embd \
        --block-size $block --batch-size $batch --max-iters 60 --eval-interval 0 --eval-iters 1 --device cpu \
        --threads 1 --log-interval 1000000 > "$work/calib$i.json" 2>/dev/null &
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
P=$(( 65 * embd + block * embd + layers * (12 * embd * embd + 13 * embd) + 2 * embd ))
H=$($py -c "print(max(10, round($task_seconds / $cpu_step)))")
# tau: bench seconds per GPU second (a task's compute); beta: bench bytes per GPU byte.
read -r tau beta <<< "$($py -c "print($H * $cpu_step / ($gpu_h * $gpu_step), $P / $gpu_params)")"

cat > "$work/spec.json" <<JSON
{"name": "bench", "model": {"n_layer": $layers, "n_head": $heads, "n_embd": $embd, "block_size": $block, "vocab_size": 65},
 "data": "$work/data", "init": {"seed": 1337},
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
hub="hl-hub-$$"
hl_netns_add "$hub" || exit 1
req_port=5555; pub_port=5556
ip netns exec "$hub" "$build/bin/crowdtrain-server" "$work/spec.json" --state "$work/state" \
    --bind "tcp://0.0.0.0:$req_port" --publish "tcp://0.0.0.0:$pub_port" --heartbeat-ms 1000 --liveness "$liveness" --threads 1 \
    > "$work/server.out" 2> "$work/server.err" &
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
    hl_netns_add "$ns" && hl_link "$hub" "$ns" "$i" "$down_k" "$up_k" || exit 1
    ip netns exec "$ns" "$build/bin/link_relay" relay --forward "$req_port:10.77.$i.1:$req_port" \
        --forward "$pub_port:10.77.$i.1:$pub_port" --delay-ms "$delay_ms" --jitter-ms "$jitter_ms" --loss "$loss" \
        --loss-unit-bytes "$($py -c "print(1448 * $beta)")" --stall-ms "$stall_ms" --seed "$i" > "$work/relay$i.out" 2> "$work/relay$i.err" &
    printf "| v%d | %s | %s / %s | %s | %s | %s / %s, %.2f |\n" "$i" "$name" "$down" "$up" "$rtt" "$loss" "$down_k" "$up_k" \
        "$($py -c "print(2 * $delay_ms)")" >> "$work/links.md"
done
for i in $(seq "$volunteers"); do
    for _ in $(seq 50); do [ -s "$work/relay$i.out" ] && break; sleep 0.1; done
done

start=$(date +%s.%N)
pids=()
for i in $(seq "$volunteers"); do
    ip netns exec "hl-v$i-$$" timeout 3000 "$build/bin/crowdtrain-worker" join "tcp://127.0.0.1:$req_port" bench \
        --server-key "$key" --data-dir "$work/v$i" --name "v$i" --threads 1 --max-rounds "$rounds" "${overlap[@]}" "${local_data[@]}" \
        > "$work/v$i.json" 2> "$work/v$i.log" &
    pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid" || true; done
swarm_seconds=$(echo "$(date +%s.%N) - $start" | bc)
sleep 1

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
