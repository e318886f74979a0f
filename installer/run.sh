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
# No display: the volunteer daemon with the built-in demo project joined (a
# coordinator on loopback training a small GPT on Debian's fortunes corpus),
# printing its progress in plain words until Ctrl-C. In another terminal,
# `build/release/bin/crowdtrain-worker status` (or `catalog`, `metrics`,
# `checkpoints`, `generate ROUND PROMPT`) talks to the same daemon.
exec "$bin/crowdtrain-worker" demo "$@"
