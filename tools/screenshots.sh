#!/usr/bin/env bash
# Runs the real desktop app under Xvfb as a new user would (fresh XDG
# folders, first start): it starts the service, the demo project is joined,
# and once the dashboard has rounds to show and a checkpoint is downloaded
# the app saves a PNG of each page.
#   tools/screenshots.sh [BUILD_DIR] [OUT_DIR]
# CROWDTRAIN_APP_ARGS adds options to the app (e.g. "--dark"; QT_SCALE_FACTOR=2 for high DPI).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/dev}
out=${2:-$build/screenshots}
bin=$(realpath "$build/bin")
home=$(mktemp -d /tmp/crowdtrain-screens.XXXXXX)
mkdir -p "$out" "$home/run" && chmod 700 "$home/run"
export HOME=$home XDG_RUNTIME_DIR=$home/run XDG_CONFIG_HOME=$home/config XDG_DATA_HOME=$home/data XDG_CACHE_HOME=$home/cache
# The demo joined before the app starts, as the first-run wizard would do it.
"$bin/crowdtrain-worker" run >"$home/daemon.log" 2>&1 &
daemon=$!
trap 'kill $daemon 2>/dev/null; wait $daemon 2>/dev/null; rm -rf "$home"' EXIT
for _ in $(seq 50); do "$bin/crowdtrain-worker" status >/dev/null 2>&1 && break; sleep 0.2; done
"$bin/crowdtrain-worker" join demo demo-fortunes >/dev/null
timeout 240 xvfb-run -a -s "-screen 0 1280x860x24" "$bin/crowdtrain" --screenshot-dir "$(realpath "$out")" ${CROWDTRAIN_APP_ARGS:-}
ls -l "$out"
