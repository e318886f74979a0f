#!/usr/bin/env bash
# The volunteer daemon as a new user meets it, on this machine, in fresh
# XDG folders (nothing cached, the demo corpus prepared from scratch):
#   - seconds from `crowdtrain-worker demo` to the first inner step, the
#     first accepted task and the first closed round;
#   - the control API's round trip while training (bench_control, p50/p99);
#   - `crowdtrain-worker status` end to end, a fresh process each time;
#   - the daemon's CPU and resident memory while paused.
#
#   bench/daemon_demo.sh [BUILD_DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build/dev}
bin=$build/bin
work=$(mktemp -d)
export XDG_DATA_HOME=$work/data XDG_CONFIG_HOME=$work/config XDG_RUNTIME_DIR=$work/run
mkdir -p "$XDG_RUNTIME_DIR" && chmod 700 "$XDG_RUNTIME_DIR"
cleanup() { [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
now() { date +%s.%N; }
status() { "$bin/crowdtrain-worker" status --json 2>/dev/null || true; }
field() { /usr/bin/python3 -c "import json,sys; d=json.loads(sys.stdin.read() or '{}'); print(d.get('$1', 0))"; }

t0=$(now)
"$bin/crowdtrain-worker" demo > "$work/demo.out" 2> "$work/demo.err" &
pid=$!
first_step= first_accept= first_round=
while [ -z "$first_round" ]; do
    s=$(status)
    if [ -n "$s" ]; then
        [ -z "$first_step" ] && [ "$(echo "$s" | field step)" != "0" ] && first_step=$(now)
        [ -z "$first_accept" ] && [ "$(echo "$s" | field accepted)" != "0" ] && first_accept=$(now)
        [ -z "$first_round" ] && [ "$(echo "$s" | field version)" != "0" ] && first_round=$(now)
    fi
    if (( $(echo "$(now) - $t0 > 300" | bc) )); then echo "no round within 300 s" >&2; exit 1; fi
    sleep 0.05
done
[ -z "$first_step" ] && first_step=$first_round
[ -z "$first_accept" ] && first_accept=$first_round
echo "| from \`crowdtrain-worker demo\` to | seconds |"
echo "| --- | ---: |"
printf "| first inner step | %.2f |\n| first accepted task | %.2f |\n| first closed round | %.2f |\n" \
    "$(echo "$first_step - $t0" | bc)" "$(echo "$first_accept - $t0" | bc)" "$(echo "$first_round - $t0" | bc)"
echo
echo "Control API round trip while training:"
"$bin/bench_control" "$XDG_RUNTIME_DIR/crowdtrain" 2000
echo
runs=50
start=$(now)
for _ in $(seq $runs); do "$bin/crowdtrain-worker" status > /dev/null; done
end=$(now)
printf "\`crowdtrain-worker status\`, a new process each time: %.1f ms mean over %d runs\n" \
    "$(echo "($end - $start) * 1000 / $runs" | bc -l)" "$runs"
"$bin/crowdtrain-worker" pause > /dev/null
sleep 5
daemon=$(pgrep -f "crowdtrain-daemon demo" | head -1)
ticks() { awk '{print $14 + $15}' "/proc/$daemon/stat"; }
hz=$(getconf CLK_TCK)
c0=$(ticks); sleep 30; c1=$(ticks)
rss=$(awk '/VmRSS/ {print $2}' "/proc/$daemon/status")
printf "Paused daemon: %.2f%% of a core over 30 s, resident memory %.0f MiB\n" \
    "$(echo "($c1 - $c0) * 100 / $hz / 30" | bc -l)" "$(echo "$rss / 1024" | bc -l)"
