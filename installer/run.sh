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
# No display: the headless worker and a local demo project (a coordinator
# and two volunteers on loopback), then a sample from its checkpoint.
exec installer/demo-swarm.sh "$bin" "${CROWDTRAIN_DEMO_ROUNDS:-10}"
