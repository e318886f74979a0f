#!/usr/bin/env bash
# The headless main job: a local demo project on this machine. Prepares Tiny
# Shakespeare (char-level), starts crowdtrain-server with the demo project on
# loopback and two crowdtrain-worker volunteers, lets them train for ROUNDS
# rounds while the coordinator logs each round, then samples from the newest
# published checkpoint.
#
#   installer/demo-swarm.sh BIN_DIR [ROUNDS]
set -euo pipefail
bin=$1
rounds=${2:-10}
corpus=${CROWDTRAIN_CORPUS:-$(dirname "$0")/../../shared/data/tinyshakespeare.txt}
if [ ! -f "$corpus" ]; then
    echo "demo: no corpus; set CROWDTRAIN_CORPUS=FILE.txt" >&2
    exit 2
fi
demo=${CROWDTRAIN_DEMO_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/crowdtrain/demo}
rm -rf "$demo"
mkdir -p "$demo"
server_pid=
trap '[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; true' EXIT

"$bin/crowdtrain-prepare" "$corpus" --out "$demo/data" --tokenizer char --val-fraction 0.1
cat > "$demo/demo.project.json" <<JSON
{"name": "demo", "description": "Tiny Shakespeare, character-level: the built-in local demo project",
 "model": {"n_layer": 4, "n_head": 4, "n_embd": 128, "block_size": 64, "vocab_size": 65},
 "data": "data",
 "inner": {"steps": 50, "batch_size": 12, "learning_rate": 1e-3, "min_lr": 1e-4, "warmup_iters": 10,
           "lr_decay_iters": $((rounds * 50)), "beta1": 0.9, "beta2": 0.99, "weight_decay": 0.1, "grad_clip": 1.0},
 "round": {"token_target": 76800, "deadline_seconds": 300},
 "checkpoints": {"every_rounds": 5, "keep_last": 3},
 "validation": {"batches": 20, "batch_size": 16}}
JSON
"$bin/crowdtrain-server" "$demo/demo.project.json" --state "$demo/server" --bind 'tcp://127.0.0.1:*' \
    --publish 'tcp://127.0.0.1:*' --heartbeat-ms 1000 > "$demo/server.json" 2> "$demo/server.log" &
server_pid=$!
for _ in $(seq 300); do [ -s "$demo/server.json" ] && break; sleep 0.2; done
read -r key endpoint < <(/usr/bin/python3 -c \
    "import json,sys; d=json.load(open(sys.argv[1])); print(d['public_key'], d['requests'])" "$demo/server.json")
echo "demo: coordinator at $endpoint, key $key"
pids=()
for name in alice bob; do
    "$bin/crowdtrain-worker" join "$endpoint" demo --server-key "$key" --data "$demo/data" \
        --data-dir "$demo/$name" --name "$name" --threads 1 --max-rounds "$rounds" > "$demo/$name.json" &
    pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done
echo "demo: volunteers' summaries:"; cat "$demo/alice.json" "$demo/bob.json"
kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=
newest=$(ls -d "$demo/server/demo/checkpoints/round-"* 2>/dev/null | sort -t- -k2 -n | tail -n 1)
if [ -n "$newest" ]; then
    echo "demo: sampling from $newest"
    "$bin/crowdtrain-train" sample --checkpoint "$newest" --tokenizer-dir "$demo/data/tokenizer" \
        --prompt "ROMEO:" --max-new-tokens 200
fi
