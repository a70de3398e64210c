#!/bin/bash
# Decode (by default) of the `cpu` backend through `lattn bench`, one or two
# builds alternated round by round, so that a change in the machine's load
# hits both alike; then per case and build: the fastest repeat, the median
# of the runs' medians (and their range), and the median of the runs'
# same-run roofline fractions. docs/perf.md ("CPU decode at batch 1") says
# what it measured and how to read it on a shared machine.
#
#   scripts/bench_cpu_ab.sh ROUNDS LATTN_A [LATTN_B] [-- lattn bench flags replacing the default cases]
#
# Each LATTN is a `lattn` binary (a build's tools/lattn finds its own
# liblattn). The load average is printed before every run: on a loaded
# machine, trust the minima and the A/B difference, not the fractions.
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
ROUNDS=${1:?rounds}
A=${2:?lattn binary}
shift 2
B=""
if [ $# -gt 0 ] && [ "$1" != "--" ]; then B=$1; shift; fi
[ "${1:-}" = "--" ] && shift
CASES=(--device cpu --backend cpu --phase decode --heads 16,128 --batch 1,8 --seq 1024,4096,16384,65536 --repeats 21)
[ $# -gt 0 ] && CASES=(--device cpu --backend cpu "$@")
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

round=1
while [ "$round" -le "$ROUNDS" ]; do
  for tag in A B; do
    bin=$A
    [ "$tag" = B ] && bin=$B
    [ -z "$bin" ] && continue
    echo "round $round, $tag ($bin): load average $(cut -d' ' -f1-3 /proc/loadavg)${LATTN_BENCH_IN_GROUP:+, $(cat /proc/self/autogroup)}" >&2
    "$bin" bench "${CASES[@]}" -q -o csv > "$OUT/$tag.$round.csv"
  done
  round=$((round + 1))
done

/usr/bin/python3 - "$OUT" <<'EOF'
import csv, glob, statistics, sys
from collections import defaultdict
runs = defaultdict(lambda: defaultdict(list))
for path in sorted(glob.glob(sys.argv[1] + "/*.csv")):
    tag = path.rsplit("/", 1)[1].split(".")[0]
    for row in csv.DictReader(open(path)):
        runs[row["name"]][tag].append(row)
print(f"{'case':48} {'build':5} {'runs':>4} {'min us':>10} {'median us':>10} {'run medians':>23} {'fraction':>8} {'MOVED':>5}")
for name, tags in runs.items():
    for tag in sorted(tags):
        rows = tags[tag]
        mins = [float(r["min_us"]) for r in rows]
        meds = [float(r["median_us"]) for r in rows]
        frac = statistics.median(float(r["roofline_fraction"]) for r in rows)
        moved = sum(int(r.get("ceilings_moved") or 0) for r in rows)
        print(f"{name:48} {tag:5} {len(rows):4} {min(mins):10.1f} {statistics.median(meds):10.1f} "
              f"{min(meds):11.1f}-{max(meds):11.1f} {frac:8.3f} {moved:5}")
EOF
