#!/usr/bin/env bash
# DiLoCo across volunteer processes against synchronous training on the same
# tokens, one run, one machine, one environment:
#   - quality: the coordinator's validation loss after R rounds of V workers
#     against crowdtrain-train with V times the batch on the same tokens;
#   - communication: bytes each volunteer sent and received per training
#     token, against a ring all-reduce of fp32 gradients every step;
#   - utilisation: each volunteer's compute time over its wall time.
#
#   bench/diloco_swarm.sh [BUILD_DIR] [ROUNDS] [VOLUNTEERS] [H]
#
# CODEC=int8|sparse (see below) picks the payload codec. SEED (default 1337)
# seeds theta_0 (the spec's init.seed) and the synchronous run.
# OVERLAP=1 runs the volunteers with --overlap (the next round's task trains
# while the last uploads and the round closes).
# HOSTILE=zeros|noise|flip|big|ramp|concentrated|flat adds HOSTILE_KEYS (default
# 1) hostile volunteers (bench_hostile_worker, each its own key; with
# HOSTILE_AFTER=N their first N tasks are honest) beside the honest ones;
# the honest ones are stopped after STALL_SECONDS (default 1200) if the
# project stalls. bench/attack_swarm.sh uses both.
# TRUST_SPEC='{...}': the spec's "trust" object (bench/attack_swarm.sh).
# CHURN_SECONDS=N: every N seconds one volunteer (in turn) is SIGKILLed and,
# CHURN_DOWN_SECONDS (default 5) later, started again on its data folder
# (its theta on disk, its error-feedback buffer lost); each run of a
# volunteer keeps its counts in a --summary-file, summed per volunteer.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build/dev}
rounds=${2:-30}
volunteers=${3:-4}
H=${4:-100}
batch=8; block=64; layers=2; heads=2; embd=64
lr=${INNER_LR:-3e-3}; min_lr=3e-4; warmup=20
decay=${DECAY:-1}   # 1: inner cosine decay to min_lr over the run (both DiLoCo and sync); 0: constant
# CODEC=sparse: the sparse codec (SPARSE_K of SPARSE_CHUNK, decay SPARSE_DECAY,
# the update's values UPDATE_BITS wide, default 4 as the product's),
# whose outer step is plain SGD (momentum 0, lr OUTER_LR, default 4 as the
# product's default for the union update; decay default 0.8 likewise).
codec=${CODEC:-int8}
if [ "$codec" = sparse ]; then
    outer_lr=${OUTER_LR:-4.0}; outer_momentum=0
    codec_json="\"codec\": \"sparse\", \"sparse\": {\"chunk\": ${SPARSE_CHUNK:-4096}, \"k\": ${SPARSE_K:-64}, \"decay\": ${SPARSE_DECAY:-0.8}, \"update_bits\": ${UPDATE_BITS:-4}},"
else
    outer_lr=${OUTER_LR:-0.7}; outer_momentum=${OUTER_MOMENTUM:-0.8}
    codec_json="\"codec\": \"$codec\","
fi
trust_json=
[ -n "${TRUST_SPEC:-}" ] && trust_json="\"trust\": $TRUST_SPEC,"
text=${CROWDTRAIN_SHAKESPEARE:-$here/../../shared/data/tinyshakespeare.txt}
[ -f "$text" ] || { echo "$0: missing input $text (set CROWDTRAIN_SHAKESPEARE)" >&2; exit 1; }
work=$(mktemp -d)
server_pid=
cleanup() { [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; if [ -n "${KEEP_WORK:-}" ]; then echo "work: $work" >&2; else rm -rf "$work"; fi; }
trap cleanup EXIT

"$build/bin/crowdtrain-prepare" "$text" --out "$work/data" --tokenizer char --val-fraction 0.1 >/dev/null 2>&1
cat > "$work/spec.json" <<JSON
{"name": "bench", "model": {"n_layer": $layers, "n_head": $heads, "n_embd": $embd, "block_size": $block, "vocab_size": 65},
 "data": "$work/data", "init": {"seed": ${SEED:-1337}},
 "inner": {"steps": $H, "batch_size": $batch, "learning_rate": $lr, "min_lr": $min_lr, "warmup_iters": $warmup,
           "lr_decay_iters": $((decay * rounds * H)),
           "beta1": 0.9, "beta2": 0.99, "weight_decay": 0.1, "grad_clip": 1.0},
 "outer": {"lr": $outer_lr, "momentum": $outer_momentum, "nesterov": true},
 "round": {"token_target": $((volunteers * H * batch * block)), "deadline_seconds": 600},
 $codec_json $trust_json "checkpoints": {"every_rounds": 1000, "keep_last": 1},
 "validation": {"batches": 100, "batch_size": 16}}
JSON
"$build/bin/crowdtrain-server" "$work/spec.json" --state "$work/state" --bind 'tcp://127.0.0.1:*' \
    --publish 'tcp://127.0.0.1:*' --heartbeat-ms 1000 --threads 1 > "$work/server.out" 2> "$work/server.err" &
server_pid=$!
for _ in $(seq 600); do [ -s "$work/server.out" ] && break; sleep 0.2; done   # up to 120 s: a calibrating project trains a task first
key=$(/usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['public_key'])" "$work/server.out")
endpoint=$(/usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['requests'])" "$work/server.out")

start=$(date +%s.%N)
hostile_pids=()
if [ -n "${HOSTILE:-}" ]; then
    for k in $(seq "${HOSTILE_KEYS:-1}"); do
        "$build/bin/bench_hostile_worker" "$endpoint" bench "$key" "$work/data" "$work/hostile$k" "$HOSTILE" \
            > "$work/hostile$k.json" 2> "$work/hostile$k.log" &
        hostile_pids+=($!)
    done
fi
pids=()
lives=()
start_volunteer() { # VOLUNTEER MAX_ROUNDS: its next life, appending to its log
    local i=$1
    lives[i]=$(( ${lives[i]:-0} + 1 ))
    timeout "${STALL_SECONDS:-1200}" "$build/bin/crowdtrain-worker" join "$endpoint" bench --server-key "$key" --data "$work/data" \
        --data-dir "$work/v$i" --name "v$i" --threads 1 --max-rounds "$2" ${OVERLAP:+--overlap} \
        --summary-file "$work/v$i.life${lives[i]}.summary" > /dev/null 2>> "$work/v$i.log" &
    pids[i]=$!
}
for i in $(seq "$volunteers"); do start_volunteer "$i" "$rounds"; done
last_round() {
    /usr/bin/python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('SELECT coalesce(max(round), 0) FROM rounds').fetchone()[0])" \
        "$work/state/bench/ledger.sqlite" 2>/dev/null || echo 0
}
kills=0
if [ -n "${CHURN_SECONDS:-}" ]; then
    victim=1
    while sleep "$CHURN_SECONDS"; do
        now=$(last_round)
        [ "$now" -ge $((rounds - 2)) ] && break
        # The volunteer is timeout's child: kill it, not timeout (which would leave it running).
        pkill -KILL -P "${pids[victim]}" && kills=$((kills + 1))
        wait "${pids[victim]}" 2>/dev/null || true
        echo "churn: v$victim killed at round $now" >> "$work/churn.log"
        sleep "${CHURN_DOWN_SECONDS:-5}"
        start_volunteer "$victim" $((rounds - $(last_round)))
        victim=$((victim % volunteers + 1))
    done
fi
for i in $(seq "$volunteers"); do wait "${pids[i]}" || true; done
# Each volunteer's lives summed into v<i>.json (the form read below).
/usr/bin/python3 - "$work" "$volunteers" <<'PY'
import json, sys
work, volunteers = sys.argv[1], int(sys.argv[2])
import glob
for i in range(1, volunteers + 1):
    total = {}
    for path in glob.glob(f"{work}/v{i}.life*.summary"):
        for key, value in json.load(open(path)).items():
            if isinstance(value, (int, float)) and key not in ("utilisation", "version", "first_task_s"):
                total[key] = total.get(key, 0) + value
    total["lives"] = len(glob.glob(f"{work}/v{i}.life*.summary"))
    open(f"{work}/v{i}.json", "w").write(json.dumps(total) + "\n")
PY
[ "$kills" -gt 0 ] && echo "churn: $kills volunteers killed and restarted (every ${CHURN_SECONDS} s, down ${CHURN_DOWN_SECONDS:-5} s)" >&2
if [ "${#hostile_pids[@]}" -gt 0 ]; then
    for pid in "${hostile_pids[@]}"; do kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true; done
    echo "hostile ($HOSTILE x ${#hostile_pids[@]}): $(tail -n 1 "$work/hostile1.json")" >&2
    /usr/bin/python3 - "$work/state/bench/ledger.sqlite" <<'PY' >&2
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
for reason, count in db.execute(
        "SELECT substr(reason, 1, instr(reason || ':', ':') - 1), count(*) FROM contributions c "
        "JOIN volunteers v USING (public_key) WHERE v.display_name LIKE 'hostile-%' GROUP BY 1"):
    print(f"hostile submissions: {count} {'accepted' if not reason else reason}")
accepted, total = db.execute(
    "SELECT sum(accepted), count(*) FROM contributions c JOIN volunteers v USING (public_key) "
    "WHERE v.display_name NOT LIKE 'hostile-%'").fetchone()
print(f"honest submissions: {accepted} of {total} accepted")
PY
fi
swarm_seconds=$(echo "$(date +%s.%N) - $start" | bc)
sqlite3_db="$work/state/bench/ledger.sqlite"
# The last round's validation loss, which the coordinator's evaluation
# records after its close (seconds on a busy machine): waited for.
diloco_val=$(/usr/bin/python3 - "$sqlite3_db" <<'PY'
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1])
for _ in range(600):
    row = db.execute("SELECT round, val_loss FROM rounds ORDER BY round DESC LIMIT 1").fetchone()
    if row and row[1] is not None:
        break
    time.sleep(0.5)
print(f"{row[1]} {row[0]}")
PY
)
kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=

# The same tokens as the volunteers trained (a round that wraps up trains a
# little less than its target), rounded to whole synchronous steps.
tokens=$(/usr/bin/python3 -c "import json,glob,sys; print(sum(json.loads(open(f).read().strip().splitlines()[-1])['tokens'] for f in glob.glob(sys.argv[1] + '/v*.json')))" "$work")
steps=$(( (tokens + volunteers * batch * block / 2) / (volunteers * batch * block) ))
# The synchronous runs: one with the volunteers' schedule (cosine decay over
# the run, or constant after the warmup with DECAY=0), one with the other.
sync_run() {
    "$build/bin/crowdtrain-train" --data "$work/data" --n-layer $layers --n-head $heads --n-embd $embd \
        --block-size $block --batch-size $((volunteers * batch)) --max-iters $steps --learning-rate $lr --min-lr "$1" \
        --warmup-iters $warmup --lr-decay-iters $steps --beta1 0.9 --beta2 0.99 --weight-decay 0.1 --grad-clip 1.0 \
        --dropout 0 --eval-interval 0 --eval-iters 100 --device cpu --threads 1 --seed ${SEED:-1337} --log-interval 1000000 2>/dev/null | tail -n 1
}
if [ -n "${SKIP_SYNC:-}" ]; then   # quick experiments: the swarm only
    sync='{"final_val_loss": 1, "steps": 0, "tokens_per_second": 0}'; sync_other=$sync
else
    if [ "$decay" = 1 ]; then same=$min_lr; other=$lr; else same=$lr; other=$min_lr; fi
    sync=$(sync_run $same)
    sync_other=$(sync_run $other)
fi

/usr/bin/python3 - "$work" "$volunteers" "$rounds" "$H" "$batch" "$block" "$diloco_val" "$sync" "$swarm_seconds" "$embd" "$layers" "$sync_other" "$decay" <<'PY'
import json, sys, glob
work, V, R, H, B, T = sys.argv[1], *map(int, sys.argv[2:7])
val, last_round = sys.argv[7].split()
sync = json.loads(sys.argv[8])
summaries = [json.loads(open(f).read().strip().splitlines()[-1]) for f in sorted(glob.glob(f"{work}/v*.json"))]
d, L, vocab = int(sys.argv[10]), int(sys.argv[11]), 65
P = vocab * d + T * d + L * (12 * d * d + 13 * d) + 2 * d  # GPT-2 with a tied head
tokens = sum(s["tokens"] for s in summaries)
sent = sum(s["bytes_sent"] for s in summaries); recv = sum(s["bytes_received"] for s in summaries)
cosine = json.loads(sys.argv[12])
other = "constant rate" if int(sys.argv[13]) else "cosine decay"
print(f"| volunteers | rounds | H | tokens | DiLoCo val loss | sync val loss (same schedule) | ratio | sync, {other} |")
print(f"| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
print(f"| {V} | {last_round} | {H} | {tokens} | {float(val):.4f} | {sync['final_val_loss']:.4f} | {float(val)/sync['final_val_loss']:.3f} | {cosine['final_val_loss']:.4f} |")
print()
per_token = (sent + recv) / tokens
dp = 2 * 2 * (V - 1) / V * 4 * P / (B * T)
print("| bytes per training token | sent | received | total | data-parallel all-reduce | reduction |")
print("| --- | ---: | ---: | ---: | ---: | ---: |")
print(f"| per volunteer | {sent/tokens:.2f} | {recv/tokens:.2f} | {per_token:.2f} | {dp:.1f} | {dp/per_token:.0f}x |")
print()
print("| volunteer | tasks | accepted | tokens | compute s | wall s | utilisation | requests per task |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for i, s in enumerate(summaries, 1):
    print(f"| v{i} | {s['tasks']} | {s['accepted']} | {s['tokens']} | {s['compute_s']:.1f} | {s['wall_s']:.1f} | {s['compute_s']/s['wall_s']:.3f} | {s['requests']/max(1, s['tasks']):.1f} |")
print(f"\nsync run: {sync['steps']} steps of batch {V*B}, {sync['tokens_per_second']:.0f} tokens/s; P = {P} parameters")
import sqlite3
rows = sqlite3.connect(f"{work}/state/bench/ledger.sqlite").execute(
    "SELECT round, val_loss, tokens FROM rounds ORDER BY round").fetchall()
step = max(1, len(rows) // 10)
print("DiLoCo val loss by round: " + ", ".join(f"{r}: {v:.3f}" for r, v, _ in rows[::step] if v is not None))
full = V * H * B * T
print(f"round tokens: mean {sum(t for _, _, t in rows[1:]) / max(1, len(rows) - 1) / full:.3f} of the target (wrap-up)")
PY
