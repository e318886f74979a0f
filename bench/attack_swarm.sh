#!/usr/bin/env bash
# The coordinator's submission gate against hostile keys beside honest
# volunteers: bench/diloco_swarm.sh with HONEST (default 4) honest
# volunteers for ROUNDS rounds, once alone and once with each hostile mode
# of bench_hostile_worker. Prints, per mode: the validation loss after the
# last round against the run without an attacker (target: within 1%, never
# stalled), the honest volunteers' acceptance (target: at least 95%), the
# hostile keys' submissions by outcome, the rounds from the first hostile
# submission to the first refusal of one ("rounds to detection"; "-" when
# none was refused), and how many rounds the server's log flagged (refusals
# or capped new keys).
#
#   bench/attack_swarm.sh [BUILD_DIR] [ROUNDS] [H]
#
# MODES (default "zeros noise flip"): the hostile modes to run, of zeros,
# noise, flip, big, ramp, concentrated, flat (bench/hostile_worker.cpp;
# HOSTILE_SCALE sets big's and flat's factor). Sybils:
# HOSTILE_KEYS=N hostile keys at once (beside HONEST honest ones: N=1 of
# HONEST=9 is 10% of the keys, 2 of 4 33%, 4 of 4 50%, 30 of 1 many fresh
# keys); HOSTILE_AFTER=T: their first T tasks are honest (keys that earn
# trust, then attack). CODEC=sparse runs the sparse codec; TRUST_SPEC (a
# JSON object) is the spec's "trust" (say, {"calibrate": true},
# {"evaluate": {"rate": 1}} or {"defences": false}). All pass through to bench/diloco_swarm.sh.
# KEEP_RUNS=1 keeps each run's work folder (ledger, logs) and names it. Run it
# under `flock /tmp/crowdtrain-bench.lock`.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build/dev}
rounds=${2:-20}
H=${3:-100}
honest_count=${HONEST:-4}
# BASELINE_VAL=x: the clean run's validation loss, measured before with the
# same settings (its run is then skipped).
if [ -n "${BASELINE_VAL:-}" ]; then modes=(${MODES:-zeros noise flip}); else modes=(none ${MODES:-zeros noise flip}); fi
declare -A val reached outcome honest detect flagged
for mode in "${modes[@]}"; do
    out=$(mktemp)
    if [ "$mode" = none ]; then
        KEEP_WORK=1 SKIP_SYNC=1 HOSTILE= "$here/diloco_swarm.sh" "$build" "$rounds" "$honest_count" "$H" > "$out" 2> "$out.err"
    else
        KEEP_WORK=1 HOSTILE=$mode SKIP_SYNC=1 "$here/diloco_swarm.sh" "$build" "$rounds" "$honest_count" "$H" > "$out" 2> "$out.err"
    fi
    work=$(sed -n 's/^work: //p' "$out.err" | tail -n 1)
    row=$(grep -m1 "^| $honest_count |" "$out" || true)
    if [ -z "$row" ]; then
        echo "$mode: the run failed:" >&2; tail -n 20 "$out.err" >&2
        [ -n "$work" ] && tail -n 5 "$work/server.err" >&2
        exit 1
    fi
    reached[$mode]=$(echo "$row" | awk -F'|' '{gsub(/ /, "", $3); print $3}')
    val[$mode]=$(echo "$row" | awk -F'|' '{gsub(/ /, "", $6); print $6}')
    # Everything else from the run's ledger and server log.
    read -r honest[$mode] outcome[$mode] detect[$mode] flagged[$mode] < <(/usr/bin/python3 - "$work" "${HOSTILE_AFTER:-0}" <<'PY'
import sqlite3, sys, collections
work, after = sys.argv[1], int(sys.argv[2])
db = sqlite3.connect(f"{work}/state/bench/ledger.sqlite")
rows = db.execute(
    "SELECT v.display_name LIKE 'hostile-%', c.public_key, c.round, c.accepted, c.reason FROM contributions c "
    "JOIN volunteers v USING (public_key) ORDER BY c.submitted_at_ms, c.id").fetchall()
honest = [r for r in rows if not r[0]]
acc = sum(r[3] for r in honest)
honest_text = f"{acc}/{len(honest)}({100.0 * acc / max(1, len(honest)):.1f}%)"
# Hostile submissions after each key's first `after` (honest) ones.
seen = collections.Counter()
hostile = []
for r in rows:
    if r[0]:
        seen[r[1]] += 1
        if seen[r[1]] > after:
            hostile.append(r)
counts = collections.Counter("accepted" if r[3] else r[4].split(":")[0] for r in hostile)
outcome = ",".join(f"{n}_{what}" for what, n in sorted(counts.items())) or "-"
if hostile:
    start = min(r[2] for r in hostile)
    refused = [r[2] for r in hostile if not r[3] and not r[4].startswith("stale_version")]
    detect = str(min(refused) - start) if refused else "-"
else:
    detect = "-"
log = open(f"{work}/server.err", errors="replace").read().splitlines()
flagged = len({l.split("round ")[1].split()[0] for l in log if " closed with " in l})
print(honest_text, outcome, detect, flagged)
# For a person (stderr): what refused honest work, and when hostile work got in.
refusals = collections.Counter((r[2], r[4][:90]) for r in honest if not r[3])
for (round_, reason), n in sorted(refusals.items()):
    print(f"  honest refused in round {round_} ({n}x): {reason}", file=sys.stderr)
got_in = collections.Counter(r[2] for r in hostile if r[3])
if got_in:
    print("  hostile accepted by round: " + ", ".join(f"{k}: {v}" for k, v in sorted(got_in.items())), file=sys.stderr)
PY
)
    echo "$mode: rounds ${reached[$mode]}, val ${val[$mode]}, honest ${honest[$mode]}, hostile ${outcome[$mode]}, detection ${detect[$mode]}, flagged ${flagged[$mode]}" >&2
    grep -m2 "calibration task" "$work/server.err" >&2 || true
    # trust.evaluate's per-round lines, and a sparse round's step size when keys with little trust differ.
    grep "scored on held-out loss" "$work/server.err" | tail -n 3 >&2 || true
    grep "sparse messages scaled to norm" "$work/server.err" \
        | sed 's/.*round \([0-9]*\): .*norm \([0-9.e+-]*\) (.*plain median \([0-9.e+-]*\))/\1 \2 \3/' \
        | awk '{ r = $3 / $2; n++; s += r; if (r > m) { m = r; at = $1 } }
               END { if (n) printf "  sparse rounds whose messages the plain median would have scaled otherwise: %d, by x%.2f on average, at most x%.2f (round %s)\n", n, s / n, m, at }' >&2 || true
    grep "calibration task" "$work/server.err" | tail -n 1 >&2 || true
    # KEEP_RUNS=1: each run's work folder is kept (its ledger and logs) and named.
    if [ -n "${KEEP_RUNS:-}" ]; then echo "$mode: work kept in $work" >&2; rm -f "$out" "$out.err"; else rm -rf "$out" "$out.err" "$work"; fi
done
echo "| attacker (${HOSTILE_KEYS:-1} keys beside $honest_count, ${CODEC:-int8}, honest first ${HOSTILE_AFTER:-0}) | rounds | val loss after round $rounds | vs no attacker | honest accepted | hostile submissions (after their honest ones) | rounds to detection | rounds flagged in the log |"
echo "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: |"
[ -n "${BASELINE_VAL:-}" ] && val[none]=$BASELINE_VAL
for mode in "${modes[@]}"; do
    ratio=$(/usr/bin/python3 -c "print(f'{float(\"${val[$mode]}\") / float(\"${val[none]}\") - 1:+.2%}')")
    echo "| $mode | ${reached[$mode]} | ${val[$mode]} | $ratio | ${honest[$mode]} | ${outcome[$mode]//_/ } | ${detect[$mode]} | ${flagged[$mode]} |"
done
