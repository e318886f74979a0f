#!/usr/bin/env bash
# The desktop app's own cost while it shows live training (issue 17: under
# 2% of one core, memory not growing): the real app under Xvfb on the
# dashboard, the daemon training the demo project, for MINUTES minutes;
# every INTERVAL seconds the app's CPU (user + system, % of one core over
# the interval) and resident memory are read from /proc and printed as a
# table. The daemon's own CPU is the training, not the app's, and is left out.
#   bench/app_resources.sh [BUILD_DIR] [MINUTES=10] [INTERVAL=60]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/dev}
minutes=${2:-10}
interval=${3:-60}
bin=$(realpath "$build/bin")
home=$(mktemp -d /tmp/crowdtrain-appres.XXXXXX)
mkdir -p "$home/run" && chmod 700 "$home/run"
export HOME=$home XDG_RUNTIME_DIR=$home/run XDG_CONFIG_HOME=$home/config XDG_DATA_HOME=$home/data XDG_CACHE_HOME=$home/cache
"$bin/crowdtrain-worker" run >"$home/daemon.log" 2>&1 &
daemon=$!
cleanup() {
    [ -n "${app:-}" ] && kill "$app" 2>/dev/null
    kill $daemon 2>/dev/null; wait $daemon 2>/dev/null
    rm -rf "$home"
}
trap cleanup EXIT
for _ in $(seq 50); do "$bin/crowdtrain-worker" status >/dev/null 2>&1 && break; sleep 0.2; done
"$bin/crowdtrain-worker" join demo demo-fortunes >/dev/null
ms=$(( (minutes * 60 + 30) * 1000 ))
xvfb-run -a -s "-screen 0 1280x860x24" "$bin/crowdtrain" --page dashboard --quit-after-ms $ms >"$home/app.log" 2>&1 &
for _ in $(seq 100); do
    app=$(pgrep -n -f "^$bin/crowdtrain --page dashboard" || true)
    [ -n "$app" ] && break
    sleep 0.1
done
[ -n "$app" ] || { echo "the app did not start" >&2; cat "$home/app.log" >&2; exit 1; }
tick=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$app/stat"; }
rss() { awk '/VmRSS/ {print $2}' "/proc/$app/status"; }
echo "| minute | app CPU (% of one core) | app RSS (MiB) | daemon state |"
echo "| ---: | ---: | ---: | --- |"
before=$(cpu)
for i in $(seq $(( minutes * 60 / interval ))); do
    sleep "$interval"
    now=$(cpu)
    state=$("$bin/crowdtrain-worker" status 2>/dev/null | head -1 | cut -c1-40)
    awk -v a="$before" -v b="$now" -v t="$tick" -v s="$interval" -v r="$(rss)" -v m="$(( i * interval / 60 ))" -v st="$state" \
        'BEGIN { printf "| %d | %.2f | %.1f | %s |\n", m, 100 * (b - a) / t / s, r / 1024, st }'
    before=$now
done
