#!/usr/bin/env bash
# The coordinator's submission gate against hostile keys beside honest
# volunteers: bench/diloco_swarm.sh with 4 honest volunteers for ROUNDS
# rounds, once alone and once with each hostile mode of bench_hostile_worker.
# Prints the validation loss after the last round of each run against the
# run without an attacker (target: within 1%, never stalled) and the honest
# volunteers' acceptance (target: at least 95%).
#
#   bench/attack_swarm.sh [BUILD_DIR] [ROUNDS] [H]
#
# MODES (default "zeros noise flip"): the hostile modes to run, of zeros,
# noise, flip, big, ramp, concentrated (bench/hostile_worker.cpp). Sybils:
# HOSTILE_KEYS=N hostile keys at once (N=2 beside 4 honest volunteers is
# 33% of the keys, N=4 50%, N=30 many fresh keys); HOSTILE_AFTER=T: their
# first T tasks are honest (keys that earn trust, then attack). CODEC=sparse
# runs the sparse codec. All pass through to bench/diloco_swarm.sh.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build/dev}
rounds=${2:-20}
H=${3:-100}
modes=(none ${MODES:-zeros noise flip})
declare -A val reached log honest
for mode in "${modes[@]}"; do
    out=$(mktemp)
    if [ "$mode" = none ]; then
        SKIP_SYNC=1 "$here/diloco_swarm.sh" "$build" "$rounds" 4 "$H" > "$out" 2> "$out.err"
    else
        HOSTILE=$mode SKIP_SYNC=1 "$here/diloco_swarm.sh" "$build" "$rounds" 4 "$H" > "$out" 2> "$out.err"
    fi
    row=$(grep -m1 '^| 4 |' "$out")
    reached[$mode]=$(echo "$row" | awk -F'|' '{gsub(/ /, "", $3); print $3}')
    val[$mode]=$(echo "$row" | awk -F'|' '{gsub(/ /, "", $6); print $6}')
    log[$mode]=$(grep '^hostile submissions' "$out.err" | tr '\n' ';' || true)
    honest[$mode]=$(grep -m1 '^honest submissions' "$out.err" | sed 's/^honest submissions: //' || true)
    echo "$mode: rounds ${reached[$mode]}, val ${val[$mode]} ${log[$mode]} honest ${honest[$mode]}" >&2
    rm -f "$out" "$out.err"
done
echo "| attacker (${HOSTILE_KEYS:-1} keys, ${CODEC:-int8}) | rounds reached | val loss after round $rounds | vs no attacker | honest accepted | hostile submissions |"
echo "| --- | ---: | ---: | ---: | ---: | --- |"
for mode in "${modes[@]}"; do
    ratio=$(/usr/bin/python3 -c "print(f'{float(\"${val[$mode]}\") / float(\"${val[none]}\") - 1:+.2%}')")
    echo "| $mode | ${reached[$mode]} | ${val[$mode]} | $ratio | ${honest[$mode]:-} | ${log[$mode]} |"
done
