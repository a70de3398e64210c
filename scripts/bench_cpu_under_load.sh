#!/bin/bash
# Decode steps of the `cpu` backend with and without one competing busy
# process: `lattn bench` as the machine is, then again while a busy loop
# that this script starts (and bounds with `timeout`) runs beside it, and the
# ratio of the medians. Rounds alternate (quiet, loaded, quiet, ...) so that
# a change in the machine's own load shows up in both. docs/perf.md records
# what it measured and docs/cpu.md ("Threads") why the backend needs it.
#
#   scripts/bench_cpu_under_load.sh [LATTN] [ROUNDS] [-- extra lattn bench flags]
#
# LATTN defaults to build/tools/lattn; ROUNDS to 3. The load average is
# printed before every measurement: a machine that is already loaded makes
# the "quiet" column loaded too.
#
# LATTN_BENCH_NICE=-15 (root, Linux with scheduler autogroups): rerun this
# script in a session of its own whose scheduling group has that nice value.
# With autogroups a process's nice value counts only within its own session,
# so `nice` does not lift a benchmark over other sessions' compilers; the
# group's does (they keep a few percent of the cores; memory and the
# last-level cache stay shared). The busy loop of bench_cpu_under_load.sh
# runs in the same group, so "one busy process beside it" stays true.
if [ -n "${LATTN_BENCH_NICE:-}" ] && [ -z "${LATTN_BENCH_IN_GROUP:-}" ]; then
  export LATTN_BENCH_IN_GROUP=1
  exec setsid -w sh -c 'echo "$LATTN_BENCH_NICE" > /proc/self/autogroup || echo "LATTN_BENCH_NICE: cannot set the autogroup nice value; running without it" >&2; exec "$@"' sh "$0" "$@"
fi
set -eu
LATTN=${1:-build/tools/lattn}
ROUNDS=${2:-3}
[ $# -ge 2 ] && shift 2 || shift $#
[ "${1:-}" = "--" ] && shift
CASES="--device cpu --backend cpu --phase decode --batch 1 --seq 1024,4096,16384 --repeats 41 -q -o csv"
# Builds from before the ceiling check (to compare with) lack the flag.
"$LATTN" bench --help | grep -q -- --ceiling-check && CASES="$CASES --ceiling-check off"

load() { echo "$(cut -d' ' -f1-3 /proc/loadavg)${LATTN_BENCH_IN_GROUP:+, $(cat /proc/self/autogroup)}"; }

# name,median_us per case (columns by name from the CSV header).
medians() {
  awk -F, 'NR == 1 { for (i = 1; i <= NF; ++i) col[$i] = i; next }
           { printf "%s,%s,%s,%s\n", $col["name"], $col["median_us"], $col["min_us"], ("max_us" in col) ? $col["max_us"] : 0 }'
}

SPIN=""
stop_spin() { [ -n "$SPIN" ] && kill "$SPIN" 2>/dev/null; SPIN=""; }
trap stop_spin EXIT INT TERM

round=1
while [ "$round" -le "$ROUNDS" ]; do
  echo "round $round: quiet, load average $(load)"
  "$LATTN" bench $CASES "$@" | medians | sed 's/^/quiet,/' > /tmp/lattn_load_quiet.$$
  # The competitor: one busy shell loop, killed below, never older than 10 min.
  timeout 600 sh -c 'while :; do :; done' &
  SPIN=$!
  sleep 1
  echo "round $round: one busy process beside it, load average $(load)"
  "$LATTN" bench $CASES "$@" | medians | sed 's/^/loaded,/' > /tmp/lattn_load_busy.$$
  stop_spin
  # case, quiet median, loaded median, loaded / quiet; then min/max of each.
  join -t, -j 1 <(cut -d, -f2- /tmp/lattn_load_quiet.$$ | sort) <(cut -d, -f2- /tmp/lattn_load_busy.$$ | sort) 2>/dev/null |
    awk -F, '{ printf "  %-46s quiet %9.1f us (min %8.1f max %9.1f)  loaded %9.1f us (min %8.1f max %9.1f)  ratio %.2f\n",
               $1, $2, $3, $4, $5, $6, $7, $5 / $2 }' ||
    paste -d, /tmp/lattn_load_quiet.$$ /tmp/lattn_load_busy.$$
  round=$((round + 1))
done
rm -f /tmp/lattn_load_quiet.$$ /tmp/lattn_load_busy.$$
