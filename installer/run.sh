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
echo "run: no display; the headless worker and a local demo project come with the coordinator."
echo "run: built programs:"
for p in crowdtrain-worker crowdtrain-server crowdtrain-prepare crowdtrain-train; do
    "$bin/$p" --version
done
