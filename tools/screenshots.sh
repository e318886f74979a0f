#!/usr/bin/env bash
# Runs the real desktop app under Xvfb as a new user's first start has it
# (fresh XDG folders, no service running): the app starts the service, the
# first-run wizard is walked (its pages saved as wizard-*.png, the project
# page also while the service is still starting), the demo project is
# joined, and once the dashboard has rounds to show and a checkpoint is
# downloaded and tried, the app saves a PNG of each page.
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

# The service the app started outlives it (closing the app never stops
# training): stop the one whose environment names this run's folder.
stop_service() {
    for dir in /proc/[0-9]*; do
        [[ $(cat "$dir/comm" 2>/dev/null) == crowdtrain-daem* ]] || continue
        tr '\0' '\n' <"$dir/environ" 2>/dev/null | grep -qx "XDG_RUNTIME_DIR=$home/run" && kill "${dir#/proc/}" || true
    done
}
trap 'stop_service; sleep 1; rm -rf "$home"' EXIT
timeout 400 xvfb-run -a -s "-screen 0 1280x860x24" "$bin/crowdtrain" --screenshot-dir "$(realpath "$out")" \
    --walk-first-run ${CROWDTRAIN_APP_ARGS:-}
ls -l "$out"
