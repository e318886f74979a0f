#!/usr/bin/env bash
# The coordinator's submission gate against one hostile key beside honest
# volunteers: bench/diloco_swarm.sh with 4 honest volunteers for ROUNDS
# rounds, once alone and once with each hostile mode of bench_hostile_worker
# (zeros, noise just under the norm ceiling, the honest update sign-flipped).
# Prints the validation loss after the last round of each run against the
# run without an attacker (target: within 1%, never stalled).
#
#   bench/attack_swarm.sh [BUILD_DIR] [ROUNDS] [H]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build/dev}
rounds=${2:-20}
H=${3:-100}
declare -A val reached log
for mode in none zeros noise flip; do
    out=$(mktemp)
    if [ "$mode" = none ]; then
        SKIP_SYNC=1 "$here/diloco_swarm.sh" "$build" "$rounds" 4 "$H" > "$out" 2> "$out.err"
    else
        HOSTILE=$mode SKIP_SYNC=1 "$here/diloco_swarm.sh" "$build" "$rounds" 4 "$H" > "$out" 2> "$out.err"
    fi
    row=$(grep -m1 '^| 4 |' "$out")
    reached[$mode]=$(echo "$row" | awk -F'|' '{gsub(/ /, "", $3); print $3}')
    val[$mode]=$(echo "$row" | awk -F'|' '{gsub(/ /, "", $6); print $6}')
    log[$mode]=$(grep '^hostile' "$out.err" | tr '\n' ';' || true)
    echo "$mode: rounds ${reached[$mode]}, val ${val[$mode]} ${log[$mode]}" >&2
    rm -f "$out" "$out.err"
done
echo "| attacker | rounds reached | val loss after round $rounds | vs no attacker | hostile submissions |"
echo "| --- | ---: | ---: | ---: | --- |"
for mode in none zeros noise flip; do
    ratio=$(/usr/bin/python3 -c "print(f'{float(\"${val[$mode]}\") / float(\"${val[none]}\") - 1:+.2%}')")
    echo "| $mode | ${reached[$mode]} | ${val[$mode]} | $ratio | ${log[$mode]} |"
done
