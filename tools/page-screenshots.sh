#!/usr/bin/env bash
# Screenshots of the public project page (crowdtrain-server --http) as a
# visitor sees it: a real coordinator on loopback, two real volunteers
# (crowdtrain-worker join ENDPOINT, one with a <script>-shaped display name)
# training a tiny Tiny Shakespeare model until ROUNDS rounds have closed,
# then Debian's headless chromium saves the page at desktop and phone widths,
# light and dark. Nothing leaves the machine (every other host name is made
# unresolvable for the browser).
#   tools/page-screenshots.sh [BUILD_DIR] [OUT_DIR] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/ci}
out=${2:-$build/page-screenshots}
rounds=${3:-12}
bin=$(realpath "$build/bin")
corpus=$(realpath ../shared/data/tinyshakespeare.txt)
work=$(mktemp -d /tmp/crowdtrain-page.XXXXXX)
mkdir -p "$out"
out=$(realpath "$out")
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

"$bin/crowdtrain-prepare" "$corpus" --tokenizer char --val-fraction 0.1 --out "$work/data" >/dev/null
cat >"$work/shakespeare.json" <<SPEC
{"name": "tiny-shakespeare",
 "description": "A character-level GPT-2 learns to write like Shakespeare, trained by volunteers' GPUs.",
 "model": {"n_layer": 2, "n_head": 2, "n_embd": 64, "block_size": 64, "vocab_size": 65},
 "data": "data",
 "inner": {"steps": 30, "batch_size": 8, "learning_rate": 3e-3, "min_lr": 3e-4, "warmup_iters": 10},
 "round": {"token_target": 30000, "deadline_seconds": 120},
 "checkpoints": {"every_rounds": 4, "keep_last": 3},
 "validation": {"batches": 8, "batch_size": 16},
 "token_goal": 1000000, "license": "CC-BY-4.0", "checkpoint_access": "everyone",
 "prompts": ["ROMEO:"]}
SPEC
"$bin/crowdtrain-server" "$work/shakespeare.json" --state "$work/state" --bind 'tcp://127.0.0.1:*' \
    --publish 'tcp://127.0.0.1:*' --http 127.0.0.1:0 --threads 1 >"$work/server.out" 2>"$work/server.err" &
pids+=($!)
for _ in $(seq 100); do [ -s "$work/server.out" ] && break; sleep 0.1; done
first=$(head -1 "$work/server.out")
field() { /usr/bin/python3 -c "import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])" "$first" "$1"; }
endpoint=$(field requests)
key=$(field public_key)
page=$(field page)projects/tiny-shakespeare
echo "page-screenshots: $page"

# Each volunteer its own identity and data folder.
for name in 'Ada' '<script>alert("hi")</script>'; do
    XDG_DATA_HOME="$work/volunteer-${#pids[@]}" "$bin/crowdtrain-worker" join "$endpoint" tiny-shakespeare --server-key "$key" --name "$name" --threads 1 \
        >>"$work/workers.log" 2>&1 &
    pids+=($!)
done
api=${page/\/projects\//\/api\/projects\/}
for _ in $(seq 900); do
    version=$(curl -fs "$api" | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['version'])" || echo 0)
    [ "$version" -ge "$rounds" ] && break
    sleep 1
done
echo "page-screenshots: $version rounds closed"

shoot() { # NAME WIDTH HEIGHT [extra chromium flags]
    local name=$1 width=$2 height=$3
    shift 3
    chromium --headless=new --no-sandbox --disable-gpu --no-first-run --hide-scrollbars \
        --user-data-dir="$work/chromium" --host-resolver-rules="MAP * ~NOTFOUND, EXCLUDE 127.0.0.1" \
        --window-size="$width,$height" --virtual-time-budget=8000 --screenshot="$out/$name.png" "$@" "$page" \
        2>/dev/null
}
shoot desktop 1280 2600
shoot phone 390 3600 --force-device-scale-factor=1
shoot phone-first-screen 390 844 --force-device-scale-factor=1
shoot phone-dark-first-screen 390 844 --force-device-scale-factor=1 --blink-settings=preferredColorScheme=0 --force-dark-mode
shoot desktop-dark 1280 2600 --blink-settings=preferredColorScheme=0 --force-dark-mode
ls -l "$out"
