#!/usr/bin/env bash
# Installs everything, builds the `release` preset and runs the main job:
# the desktop app when there is a display; with none, the headless programs.
set -euo pipefail
cd "$(dirname "$0")/.."
installer/install-deps.sh
cmake --preset release
cmake --build --preset release
bin=build/release/bin
if [ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ]; then
    exec "$bin/crowdtrain" "$@"
fi
# No display: until the volunteer worker and its local demo project exist,
# the headless job is a local training run: prepare a corpus, train the tiny
# model for a few hundred steps, and sample from it.
corpus=${CROWDTRAIN_CORPUS:-../shared/data/tinyshakespeare.txt}
if [ ! -f "$corpus" ]; then
    echo "run: no display and no corpus; set CROWDTRAIN_CORPUS=FILE.txt" >&2
    exit 2
fi
demo=${CROWDTRAIN_DEMO_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/crowdtrain/demo}
rm -rf "$demo"
mkdir -p "$(dirname "$demo")"
"$bin/crowdtrain-prepare" "$corpus" --out "$demo/data" --tokenizer char
"$bin/crowdtrain-train" --data "$demo/data" --n-layer 4 --n-head 4 --n-embd 128 --block-size 64 \
    --batch-size 12 --max-iters 300 --eval-interval 100 --eval-iters 20 --log-interval 50 \
    --checkpoint "$demo/state.ckpt" --export "$demo/model"
"$bin/crowdtrain-train" sample --checkpoint "$demo/model" --tokenizer-dir "$demo/data/tokenizer" \
    --prompt "ROMEO:" --max-new-tokens 200
